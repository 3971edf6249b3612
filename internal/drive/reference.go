package drive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// ReferenceProgram is the name of the program that runs the in-process
// references (cmd/benchref); make build puts it next to custody.
const ReferenceProgram = "custody-bench-ref"

// Reference is one in-process measurement, as custody asks it of
// ReferenceProgram on its standard input (JSON).
type Reference struct {
	// Kind is "sdk" (MeasureSDK) or "pull" (Pull).
	Kind string `json:"kind"`
	// Transport names the transport, as its Describe does.
	Transport string            `json:"transport"`
	Params    map[string]string `json:"params,omitempty"`
	// MinTime is MeasureSDK's least time per figure.
	MinTime time.Duration `json:"min_time,omitempty"`
	// Dir, BlockSize, N and Warmup are Pull's.
	Dir       string `json:"dir,omitempty"`
	BlockSize int    `json:"block_size,omitempty"`
	N         int    `json:"n,omitempty"`
	Warmup    int    `json:"warmup,omitempty"`
}

// referenceResult is what ReferenceProgram answers on its standard output.
type referenceResult struct {
	SDK  SDKResult  `json:"sdk"`
	Pull PullResult `json:"pull"`
}

// RunSDK runs an "sdk" reference with program and returns its figures.
func RunSDK(ctx context.Context, program string, ref Reference) (SDKResult, error) {
	ref.Kind = "sdk"
	res, err := run(ctx, program, ref)
	return res.SDK, err
}

// RunPull runs a "pull" reference with program and returns its figures.
func RunPull(ctx context.Context, program string, ref Reference) (PullResult, error) {
	ref.Kind = "pull"
	res, err := run(ctx, program, ref)
	return res.Pull, err
}

func run(ctx context.Context, program string, ref Reference) (referenceResult, error) {
	var res referenceResult
	in, err := json.Marshal(ref)
	if err != nil {
		return res, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, program)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("in-process reference %s (%s of %s): %w: %s", program, ref.Kind, ref.Transport, err, LastLine(stderr.Bytes()))
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return res, fmt.Errorf("in-process reference %s: its answer: %w", program, err)
	}
	return res, nil
}

// LastLine is the last non-blank line of a program's output, for an error
// that quotes why it failed.
func LastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Serve is ReferenceProgram's main: it reads one Reference from in, runs
// it on a transport from transports (by name), and writes the result to
// out.
func Serve(ctx context.Context, in io.Reader, out io.Writer, transports map[string]func() sdk.Transport) error {
	var ref Reference
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	mk, ok := transports[ref.Transport]
	if !ok {
		names := make([]string, 0, len(transports))
		for n := range transports {
			names = append(names, n)
		}
		sort.Strings(names)
		return fmt.Errorf("no in-process reference for transport %q (known: %s)", ref.Transport, strings.Join(names, ", "))
	}
	var res referenceResult
	var err error
	switch ref.Kind {
	case "sdk":
		res.SDK, err = MeasureSDK(ctx, agent.InProcess(mk), ref.Params, ref.MinTime)
	case "pull":
		if ref.N <= 0 || ref.BlockSize <= 0 || ref.Dir == "" {
			return fmt.Errorf("pull: n %d, block size %d and dir %q: want n and block size above 0 and a dir", ref.N, ref.BlockSize, ref.Dir)
		}
		res.Pull, err = Pull(ctx, agent.InProcess(mk), ref.Params, ref.Dir, ref.BlockSize, ref.N, ref.Warmup)
	default:
		return fmt.Errorf("kind %q: want sdk or pull", ref.Kind)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(res)
}
