package datadir

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"strings"
)

// The three small files of the directory share one strict text format: a
// single line
//
//	<magic> <key1>=<value1> ... <keyN>=<valueN> crc32c=<8 lowercase hex>\n
//
// The CRC-32C (Castagnoli) covers every byte before " crc32c=". Keys appear
// in a fixed order, values are non-empty and hold no space, '=' or control
// byte. Anything else, including trailing bytes, is corrupt.

const crcKey = "crc32c"

// maxFileSize bounds how much of an identity file is read; a larger file is
// corrupt by definition.
const maxFileSize = 512

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// field is one key=value pair of a line.
type field struct {
	key, value string
}

// encodeLine renders magic and fields in the line format. Callers pass
// values that satisfy validValue.
func encodeLine(magic string, fields []field) []byte {
	var b bytes.Buffer
	b.WriteString(magic)
	for _, f := range fields {
		b.WriteByte(' ')
		b.WriteString(f.key)
		b.WriteByte('=')
		b.WriteString(f.value)
	}
	sum := crc32.Checksum(b.Bytes(), castagnoli)
	fmt.Fprintf(&b, " %s=%08x\n", crcKey, sum)
	return b.Bytes()
}

// decodeLine checks data against the line format for magic and the given
// keys, in order, and returns the values. Every failure wraps errCorruptFile.
func decodeLine(magic string, keys []string, data []byte) ([]string, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", errCorruptFile, len(data), maxFileSize)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: not one newline-terminated line", errCorruptFile)
	}
	line := string(data[:len(data)-1])
	sep := " " + crcKey + "="
	i := strings.LastIndex(line, sep)
	if i < 0 {
		return nil, fmt.Errorf("%w: no checksum", errCorruptFile)
	}
	body, sumText := line[:i], line[i+len(sep):]
	want, ok := parseHex32(sumText)
	if !ok {
		return nil, fmt.Errorf("%w: malformed checksum %q", errCorruptFile, sumText)
	}
	if got := crc32.Checksum([]byte(body), castagnoli); got != want {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", errCorruptFile, want, got)
	}
	tokens := strings.Split(body, " ")
	if tokens[0] != magic {
		return nil, fmt.Errorf("%w: want header %q", errCorruptFile, magic)
	}
	if len(tokens)-1 != len(keys) {
		return nil, fmt.Errorf("%w: %d fields, want %d", errCorruptFile, len(tokens)-1, len(keys))
	}
	values := make([]string, len(keys))
	for n, key := range keys {
		k, v, ok := strings.Cut(tokens[n+1], "=")
		if !ok || k != key {
			return nil, fmt.Errorf("%w: field %d is not %s=", errCorruptFile, n+1, key)
		}
		if !validValue(v) {
			return nil, fmt.Errorf("%w: bad value for %s", errCorruptFile, key)
		}
		values[n] = v
	}
	return values, nil
}

// validValue reports whether v may appear as a value in the line format.
func validValue(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c == '=' || c >= 0x7f {
			return false
		}
	}
	return true
}

// parseHex32 parses exactly eight lowercase hex digits.
func parseHex32(s string) (uint32, bool) {
	if len(s) != 8 {
		return 0, false
	}
	var v uint32
	for i := 0; i < len(s); i++ {
		d, ok := hexDigit(s[i])
		if !ok {
			return 0, false
		}
		v = v<<4 | uint32(d)
	}
	return v, true
}

// hexDigit decodes one lowercase hex digit.
func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
