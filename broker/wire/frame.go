package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// FrameHeaderSize is the size of a frame's fixed prefix: a 4-byte length, a
// 1-byte message type and a 4-byte request id.
const FrameHeaderSize = 9

// frameFixed is the part of the fixed prefix counted by the length field.
const frameFixed = FrameHeaderSize - 4

// DefaultMaxFrameSize is the largest frame (length field value) a broker
// accepts unless configured otherwise.
const DefaultMaxFrameSize = 16 << 20

// Frame is one protocol unit: a message type, the request id that pairs a
// response with its request, and the message body. The body is owned by the
// Frame; ReadFrame never reuses it.
type Frame struct {
	Type  MsgType
	ReqID uint32
	Body  []byte
}

// ErrFrameTooShort is returned for a length field smaller than the fixed
// part of a frame.
var ErrFrameTooShort = errors.New("wire: frame length below minimum")

// FrameTooLargeError is returned by ReadFrame for a length field above the
// reader's limit. Nothing past the length field has been consumed.
type FrameTooLargeError struct {
	Size  uint64
	Limit uint64
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("wire: frame of %d bytes exceeds the limit of %d", e.Size, e.Limit)
}

// AppendFrame appends the encoding of f to dst and returns the result.
func AppendFrame(dst []byte, f Frame) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(frameFixed+len(f.Body)))
	dst = append(dst, byte(f.Type))
	dst = binary.BigEndian.AppendUint32(dst, f.ReqID)
	return append(dst, f.Body...)
}

// WriteFrame writes f to w in one Write call.
func WriteFrame(w io.Writer, f Frame) error {
	_, err := w.Write(AppendFrame(make([]byte, 0, FrameHeaderSize+len(f.Body)), f))
	return err
}

// ReadFrame reads one frame from r. maxSize bounds the length field (the
// bytes after it); a larger value returns *FrameTooLargeError before any body
// byte is read or allocated. io.EOF is returned only when r ends exactly at a
// frame boundary; a frame cut short returns io.ErrUnexpectedEOF.
func ReadFrame(r *bufio.Reader, maxSize uint32) (Frame, error) {
	h, err := ReadFrameHeader(r, maxSize)
	if err != nil {
		return Frame{}, err
	}
	return ReadFrameBody(r, h)
}

// FrameHeader is a frame's fixed prefix: the length field, the type and the
// request id.
type FrameHeader struct {
	// Length is the length field: 5 plus the body length.
	Length uint32
	Type   MsgType
	ReqID  uint32
}

// BodyLen is the length of the body that follows the prefix.
func (h FrameHeader) BodyLen() int { return int(h.Length) - frameFixed }

// Size is the whole frame's size on the wire, prefix included.
func (h FrameHeader) Size() int64 { return 4 + int64(h.Length) }

// ReadFrameHeader reads a frame's fixed prefix, checking the length field as
// ReadFrame does (*FrameTooLargeError, ErrFrameTooShort, io.EOF at a frame
// boundary, io.ErrUnexpectedEOF when cut short). It allocates nothing, so a
// reader can admit the body against a memory budget before reading it.
func ReadFrameHeader(r io.Reader, maxSize uint32) (FrameHeader, error) {
	if br, ok := r.(*bufio.Reader); ok {
		return readFrameHeaderBuffered(br, maxSize)
	}
	var hdr [FrameHeaderSize]byte // escapes through r: one allocation
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return FrameHeader{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < frameFixed {
		return FrameHeader{}, fmt.Errorf("%w: %d", ErrFrameTooShort, n)
	}
	if n > maxSize {
		return FrameHeader{}, &FrameTooLargeError{Size: uint64(n), Limit: uint64(maxSize)}
	}
	if _, err := io.ReadFull(r, hdr[4:]); err != nil {
		return FrameHeader{}, unexpected(err)
	}
	return FrameHeader{Length: n, Type: MsgType(hdr[4]), ReqID: binary.BigEndian.Uint32(hdr[5:9])}, nil
}

// readFrameHeaderBuffered is ReadFrameHeader from a bufio.Reader: the
// prefix is parsed in the reader's buffer rather than copied into an array
// that would escape to the heap through io.ReadFull (one allocation per
// frame on every connection, issue 31). It consumes what ReadFrameHeader
// consumes and returns the same errors.
func readFrameHeaderBuffered(br *bufio.Reader, maxSize uint32) (FrameHeader, error) {
	b, err := br.Peek(4)
	if err != nil {
		_, _ = br.Discard(len(b))
		if len(b) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF // as io.ReadFull
		}
		return FrameHeader{}, err
	}
	n := binary.BigEndian.Uint32(b)
	if n < frameFixed {
		_, _ = br.Discard(4)
		return FrameHeader{}, fmt.Errorf("%w: %d", ErrFrameTooShort, n)
	}
	if n > maxSize {
		_, _ = br.Discard(4)
		return FrameHeader{}, &FrameTooLargeError{Size: uint64(n), Limit: uint64(maxSize)}
	}
	b, err = br.Peek(FrameHeaderSize)
	if err != nil {
		_, _ = br.Discard(len(b))
		return FrameHeader{}, unexpected(err)
	}
	h := FrameHeader{Length: n, Type: MsgType(b[4]), ReqID: binary.BigEndian.Uint32(b[5:9])}
	_, _ = br.Discard(FrameHeaderSize)
	return h, nil
}

// bodyFirstChunk is how much of a body ReadFrameBody allocates before any
// of it has arrived.
const bodyFirstChunk = 64 << 10

// ReadFrameBody reads the body of the frame whose prefix is h. It allocates
// at most 64 KiB before the body's bytes arrive, and the whole body only
// once those are read, so a peer that announces a large frame and stalls
// makes the reader hold little memory. A body cut short returns
// io.ErrUnexpectedEOF.
func ReadFrameBody(r io.Reader, h FrameHeader) (Frame, error) {
	f := Frame{Type: h.Type, ReqID: h.ReqID}
	n := h.BodyLen()
	if n <= 0 {
		return f, nil
	}
	first := min(n, bodyFirstChunk)
	buf := make([]byte, first)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Frame{}, unexpected(err)
	}
	if first < n {
		whole := make([]byte, n)
		copy(whole, buf)
		buf = whole
		if _, err := io.ReadFull(r, buf[first:]); err != nil {
			return Frame{}, unexpected(err)
		}
	}
	f.Body = buf
	return f, nil
}

// DecodeFrame decodes one frame from the start of b, returning it and the
// number of bytes consumed. It is the buffer form of ReadFrame, used by
// fuzzing and by callers holding whole buffers. io.ErrUnexpectedEOF means b
// holds only part of a frame.
func DecodeFrame(b []byte, maxSize uint32) (Frame, int, error) {
	if len(b) < 4 {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(b[:4])
	if n < frameFixed {
		return Frame{}, 0, fmt.Errorf("%w: %d", ErrFrameTooShort, n)
	}
	if n > maxSize {
		return Frame{}, 0, &FrameTooLargeError{Size: uint64(n), Limit: uint64(maxSize)}
	}
	total := 4 + int(n)
	if len(b) < total {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	f := Frame{Type: MsgType(b[4]), ReqID: binary.BigEndian.Uint32(b[5:9])}
	if total > FrameHeaderSize {
		f.Body = append([]byte(nil), b[FrameHeaderSize:total]...)
	}
	return f, total, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
