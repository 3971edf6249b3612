package ring

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// violation is a breach of the ring protocol by the peer (or a
// corrupted mapping): what was wrong, where.
type violation struct{ msg string }

func (e *violation) Error() string { return "ring protocol violation: " + e.msg }

func violationf(format string, args ...any) error {
	return &violation{msg: fmt.Sprintf(format, args...)}
}

// isNotFound reports whether err is the contract's NOT_FOUND.
func isNotFound(err error) bool { return sdk.CodeOf(err) == sdk.CodeNotFound }

// Logger receives what each side reports of a violation: the host's fence,
// the plugin's refusal to serve on. hclog.Logger satisfies it.
type Logger interface {
	Error(msg string, args ...any)
}
