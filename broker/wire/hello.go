package wire

import (
	"fmt"
)

// ProtocolVersion is the highest protocol version this implementation speaks.
const ProtocolVersion uint16 = 1

// MinProtocolVersion is the lowest protocol version this implementation
// accepts.
const MinProtocolVersion uint16 = 1

// Magic opens every Hello body; a first frame without it is not a Felix
// client and is refused.
const Magic = "FELX"

// StorageIDSize is the length of a storage id ([ID-1]).
const StorageIDSize = 16

// extension ids of the Hello and HelloOK extension list.
const extStorageID uint8 = 0

// Hello is the first frame a client (or a peer broker) sends. Version is the
// highest version it speaks; Features the bits it offers. StorageID is the
// sender's storage id, sent only when Features offers FeatureStorageID and
// the sender has one (a client without storage leaves it nil) [RP-2].
type Hello struct {
	Version   uint16
	Features  Features
	StorageID []byte
}

// HelloOK is the broker's answer to Hello. Version is the version the
// connection speaks; Features the accepted bits (offered and understood);
// the limits tell the client how large a frame and a batch may be.
// StorageID is the broker's storage id, present only when FeatureStorageID
// was accepted.
type HelloOK struct {
	Version         uint16
	Features        Features
	MaxFrameSize    uint32
	MaxBatchRecords uint32
	StorageID       []byte
}

func appendStorageIDExt(e *enc, feats Features, id []byte) error {
	if !feats.Has(FeatureStorageID) || id == nil {
		return nil
	}
	if len(id) != StorageIDSize {
		return fmt.Errorf("%w: storage id of %d bytes, want %d", ErrMalformed, len(id), StorageIDSize)
	}
	e.u8(extStorageID)
	e.u16(StorageIDSize)
	e.b = append(e.b, id...)
	return nil
}

// decodeExtensions reads the extension list to the end of the body, keeping
// the storage id when feats carries its bit and skipping unknown ids.
func decodeExtensions(d *dec, feats Features) []byte {
	var id []byte
	for d.Err == nil && d.Remaining() > 0 {
		ext := d.U8("extension id")
		n := d.U16("extension length")
		val := d.Take(int(n), "extension value")
		if d.Err != nil {
			break
		}
		if ext == extStorageID && feats.Has(FeatureStorageID) {
			if n != StorageIDSize {
				d.Fail("storage id extension of %d bytes", n)
				break
			}
			id = append([]byte(nil), val...)
		}
	}
	return id
}

// EncodeHello returns the body of a Hello frame.
func EncodeHello(h Hello) ([]byte, error) {
	e := enc{b: make([]byte, 0, 32)}
	e.b = append(e.b, Magic...)
	e.u16(h.Version)
	e.u64(uint64(h.Features))
	if err := appendStorageIDExt(&e, h.Features, h.StorageID); err != nil {
		return nil, err
	}
	return e.b, nil
}

// DecodeHello decodes a Hello body. Unknown extensions are skipped, so a
// newer client's Hello decodes here.
func DecodeHello(b []byte) (Hello, error) {
	d := newDec(b)
	magic := d.Take(4, "magic")
	if d.Err == nil && string(magic) != Magic {
		d.Fail("bad magic %q", magic)
	}
	h := Hello{Version: d.U16("version"), Features: Features(d.U64("features"))}
	h.StorageID = decodeExtensions(&d, h.Features)
	return h, d.end("hello")
}

// EncodeHelloOK returns the body of a HelloOK frame.
func EncodeHelloOK(h HelloOK) ([]byte, error) {
	e := enc{b: make([]byte, 0, 48)}
	e.u16(h.Version)
	e.u64(uint64(h.Features))
	e.u32(h.MaxFrameSize)
	e.u32(h.MaxBatchRecords)
	if err := appendStorageIDExt(&e, h.Features, h.StorageID); err != nil {
		return nil, err
	}
	return e.b, nil
}

// DecodeHelloOK decodes a HelloOK body.
func DecodeHelloOK(b []byte) (HelloOK, error) {
	d := newDec(b)
	h := HelloOK{
		Version:         d.U16("version"),
		Features:        Features(d.U64("features")),
		MaxFrameSize:    d.U32("max frame size"),
		MaxBatchRecords: d.U32("max batch records"),
	}
	h.StorageID = decodeExtensions(&d, h.Features)
	return h, d.end("hello ok")
}

// Negotiate returns the version and features a broker that speaks up to
// ProtocolVersion and supports the bits in supported accepts for hello, or
// an *Error with CodeUnsupportedVersion.
func Negotiate(hello Hello, supported Features) (uint16, Features, error) {
	if hello.Version < MinProtocolVersion {
		return 0, 0, &Error{Code: CodeUnsupportedVersion,
			Message: fmt.Sprintf("protocol version %d is below the minimum %d", hello.Version, MinProtocolVersion)}
	}
	v := min(hello.Version, ProtocolVersion)
	return v, hello.Features & supported & KnownFeatures, nil
}
