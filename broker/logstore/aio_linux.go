//go:build linux && (amd64 || arm64)

package logstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direct writes through Linux native AIO.
//
// A blocking pwrite of an O_DSYNC file holds its thread for the whole
// write and cache flush (hundreds of microseconds). Go's runtime then
// hands the goroutine's processor to another thread and takes one back
// when the call returns: thread wake-ups and context switches on every
// sync, paid again by each broker. Submitted through io_submit instead,
// the write runs in the kernel while the goroutine parks in Go's network
// poller on an eventfd the kernel signals at completion, so no thread
// blocks. Native AIO (not io_uring) because container runtimes' default
// seccomp profiles allow it; recent ones refuse io_uring.

// aioFile submits one write at a time to a file opened with O_DIRECT and
// waits for it without blocking a thread. Not safe for concurrent use.
type aioFile struct {
	ctx uintptr  // aio_context_t
	efd *os.File // eventfd signalled at each completion, non-blocking
	fd  uintptr
	cb  iocb
	ev  ioEvent
}

// iocb and ioEvent are the kernel's struct iocb and struct io_event
// (include/uapi/linux/aio_abi.h) on little-endian 64-bit machines.
// Fields the writes leave zero are blank: aio_data, aio_key,
// aio_rw_flags, aio_reqprio and aio_reserved2.
type iocb struct {
	_      uint64 // aio_data
	_      uint32 // aio_key
	_      uint32 // aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

const (
	iocbCmdPwrite = 1      // IOCB_CMD_PWRITE
	iocbFlagResfd = 1 << 0 // IOCB_FLAG_RESFD
)

// newAIOFile sets up asynchronous writes to f. It fails where native AIO
// is not available (no kernel support, a seccomp profile refusing
// io_setup, the system's aio-max-nr reached); the caller then writes with
// pwrite.
func newAIOFile(f *os.File) (*aioFile, error) {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil, fmt.Errorf("io_setup: %w", e)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &aioFile{ctx: ctx, efd: os.NewFile(uintptr(efd), "aio-eventfd"), fd: f.Fd()}, nil
}

// probeAIO reports why native AIO cannot be used here, or nil.
func probeAIO() error {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return fmt.Errorf("io_setup: %w", e)
	}
	_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	return nil
}

// writeAt writes all of b at off and returns once the write is complete
// (on the device, for an O_DSYNC file). b must stay unchanged until then,
// which it does: writeAt returns only when the kernel is done with it.
func (a *aioFile) writeAt(b []byte, off int64) error {
	if len(b) == 0 {
		return nil
	}
	a.cb = iocb{opcode: iocbCmdPwrite, fildes: uint32(a.fd), buf: uint64(uintptr(unsafe.Pointer(&b[0]))),
		nbytes: uint64(len(b)), offset: off, flags: iocbFlagResfd, resfd: uint32(a.efd.Fd())}
	cbs := [1]*iocb{&a.cb}
	for {
		n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return errAIOBusy // nothing was submitted
		}
		if e != 0 {
			return fmt.Errorf("io_submit: %w", e)
		}
		if n != 1 {
			return fmt.Errorf("io_submit queued %d of 1 writes", n)
		}
		break
	}
	res, err := a.wait()
	runtime.KeepAlive(b) // the kernel read b until the completion was reaped
	if err != nil {
		return err
	}
	if res < 0 {
		return unix.Errno(-res)
	}
	if res != int64(len(b)) {
		return fmt.Errorf("short direct write: %d of %d bytes: %w", res, len(b), io.ErrShortWrite)
	}
	return nil
}

// errAIOBusy: the kernel had no room for the write (io_submit's EAGAIN)
// and nothing was submitted; the caller writes with pwrite instead.
var errAIOBusy = errors.New("logstore: native AIO queue full")

// wait reaps the one write in flight and returns its result. It parks on
// the eventfd until the kernel signals a completion; if the eventfd
// cannot be read it waits in io_getevents instead, so it never returns
// while the write may still be running.
func (a *aioFile) wait() (int64, error) {
	var cnt [8]byte
	poll := true
	for {
		var ts *unix.Timespec
		if poll {
			ts = &unix.Timespec{} // only reap what is complete
		}
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&a.ev)), uintptr(unsafe.Pointer(ts)), 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return 0, fmt.Errorf("io_getevents: %w", e)
		case n == 1:
			return a.ev.res, nil
		}
		// Nothing complete yet: the eventfd's counter is non-zero after
		// a completion (perhaps an earlier one already reaped, which only
		// costs another look).
		if _, err := a.efd.Read(cnt[:]); err != nil {
			poll = false
		}
	}
}

// close releases the AIO context and the eventfd. No write is in flight:
// writeAt does not return before its write completes.
func (a *aioFile) close() error {
	_, _, e := unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
	err := a.efd.Close()
	if e != 0 {
		err = errors.Join(fmt.Errorf("io_destroy: %w", e), err)
	}
	return err
}
