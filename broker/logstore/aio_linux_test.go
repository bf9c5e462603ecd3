//go:build linux && (amd64 || arm64)

package logstore

import (
	"testing"
	"unsafe"
)

// The structures handed to the kernel have the sizes and offsets of
// include/uapi/linux/aio_abi.h on 64-bit little-endian machines.
func TestAIOStructLayout(t *testing.T) {
	var cb iocb
	var ev ioEvent
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(iocb)", unsafe.Sizeof(cb), 64},
		{"iocb.aio_lio_opcode", unsafe.Offsetof(cb.opcode), 16},
		{"iocb.aio_fildes", unsafe.Offsetof(cb.fildes), 20},
		{"iocb.aio_buf", unsafe.Offsetof(cb.buf), 24},
		{"iocb.aio_nbytes", unsafe.Offsetof(cb.nbytes), 32},
		{"iocb.aio_offset", unsafe.Offsetof(cb.offset), 40},
		{"sizeof(io_event)", unsafe.Sizeof(ev), 32},
		{"io_event.res", unsafe.Offsetof(ev.res), 16},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
