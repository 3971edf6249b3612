package sdk

import (
	"errors"
	"fmt"
)

// Code is the outcome of a call or of one item of a batched call. Codes cross
// the process boundary unchanged, so each has one exact meaning.
type Code uint8

const (
	// CodeOK: the call or item succeeded.
	CodeOK Code = 0
	// CodeBusy: refused because the resource is in use (a running handle, a
	// registration or dlist a live transfer uses). Nothing changed; retry later.
	CodeBusy Code = 1
	// CodeNotFound: the id is unknown or was already released. Nothing changed.
	CodeNotFound Code = 2
	// CodeInvalidArgument: the request is malformed. Nothing changed.
	CodeInvalidArgument Code = 3
	// CodeRemoteDisconnect: the peer is gone.
	CodeRemoteDisconnect Code = 4
	// CodeCanceled: the operation was canceled.
	CodeCanceled Code = 5
	// CodeBackend: the backend failed. Whether anything changed is stated by
	// the call's documentation.
	CodeBackend Code = 6
	// CodeUnsupported: the transport does not implement this call or option.
	CodeUnsupported Code = 7
	// CodeTimeout: the call's deadline passed before it finished. Whether it
	// took effect is unknown: the caller must find out (Poll, Resources).
	CodeTimeout Code = 8
	// CodePluginShutdown: the transport process is gone. Every transfer it
	// initiated has stopped (the process is the fence). It is reported by
	// what stands for the process: sdk/plugin's Launch once the process
	// exited (with a *plugin.ExitError saying how), or an in-process
	// stand-in for a process that died (the fake's crash fault and Kill),
	// so that in-process tests see what the host sees. A running transport
	// never returns it: sdk/plugin turns one a live process returns into
	// CodeBackend.
	CodePluginShutdown Code = 9
)

var codeNames = [...]string{
	CodeOK:               "OK",
	CodeBusy:             "BUSY",
	CodeNotFound:         "NOT_FOUND",
	CodeInvalidArgument:  "INVALID_ARGUMENT",
	CodeRemoteDisconnect: "REMOTE_DISCONNECT",
	CodeCanceled:         "CANCELED",
	CodeBackend:          "BACKEND",
	CodeUnsupported:      "UNSUPPORTED",
	CodeTimeout:          "TIMEOUT",
	CodePluginShutdown:   "PLUGIN_SHUTDOWN",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Error is the error type every transport call returns: a code and a message
// that says what, which id, and what to do. Compare with errors.Is against
// the sentinels below; two Errors match when their codes are equal.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is matches any *Error of the same code, so errors.Is(err, ErrBusy) holds
// for every BUSY error whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinel errors, one per code. Match with errors.Is.
var (
	ErrBusy             = &Error{Code: CodeBusy}
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrInvalidArgument  = &Error{Code: CodeInvalidArgument}
	ErrRemoteDisconnect = &Error{Code: CodeRemoteDisconnect}
	ErrCanceled         = &Error{Code: CodeCanceled}
	ErrBackend          = &Error{Code: CodeBackend}
	ErrUnsupported      = &Error{Code: CodeUnsupported}
	ErrTimeout          = &Error{Code: CodeTimeout}
	ErrPluginShutdown   = &Error{Code: CodePluginShutdown}
)

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err: CodeOK for nil, the code of the first
// *Error in its chain, and CodeBackend for any other error.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeBackend
}

// MessageOf returns err's message without its code prefix.
func MessageOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) && e == err {
		return e.Message
	}
	return err.Error()
}

// FromCode builds the error for a code and message as they crossed a process
// boundary: nil for CodeOK, an *Error otherwise.
func FromCode(c Code, message string) error {
	if c == CodeOK {
		return nil
	}
	return &Error{Code: c, Message: message}
}
