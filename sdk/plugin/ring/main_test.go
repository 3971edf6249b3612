package ring

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a Client or Server left a
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
