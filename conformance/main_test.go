package conformance_test

import (
	"testing"

	"github.com/custody-dev/custody/internal/testbin"
)

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) { binDir = dir }, "custody-transport-fake")
}
