package wire

import "fmt"

// MaxStreamNameLen is the longest stream name the protocol carries.
const MaxStreamNameLen = 255

// CheckStreamName reports whether s is a valid stream name: 1 to
// MaxStreamNameLen bytes, each an ASCII letter, digit, '.', '_' or '-'.
// Every Kubernetes object name (a DNS-1123 subdomain, at most 253
// lower-case letters, digits, '-' and '.') is one, so a FelixStream's name
// is always a valid stream name. The error matches ErrMalformed, which the
// broker answers with BadRequest.
func CheckStreamName(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty stream name", ErrMalformed)
	}
	if len(s) > MaxStreamNameLen {
		return fmt.Errorf("%w: stream name of %d bytes exceeds %d", ErrMalformed, len(s), MaxStreamNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !streamNameByte(s[i]) {
			return fmt.Errorf("%w: stream name has byte 0x%02x at %d; allowed are A-Z a-z 0-9 . _ -", ErrMalformed, s[i], i)
		}
	}
	return nil
}

func streamNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
