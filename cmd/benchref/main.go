// Command custody-bench-ref runs the in-process references of `custody
// bench sdk` and `bench e2e`: the transport driven directly, two agents in
// this process. custody starts it with one request (JSON) on its standard
// input and reads the figures from its standard output; it is a program of
// its own so that custody links no transport library.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/custody-dev/custody/internal/drive"
	"github.com/custody-dev/custody/internal/heapfloor"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk"
)

func main() {
	// The heap floor of a transport process (plugin.Serve): the references
	// differ from the processes they are compared with by the process
	// boundary alone.
	floor, err := heapfloor.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, drive.ReferenceProgram+":", err)
		os.Exit(1)
	}
	heapfloor.Keep(floor)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = drive.Serve(ctx, os.Stdin, os.Stdout, map[string]func() sdk.Transport{
		"fake": func() sdk.Transport { return fake.New() },
		"ucx":  func() sdk.Transport { return ucx.New() },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, drive.ReferenceProgram+":", err)
		os.Exit(1)
	}
}
