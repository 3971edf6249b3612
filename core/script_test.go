package core

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/scripttest"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestScripts runs the data-driven scripts in testdata, one per rule of
// docs/guarantees.md and named after it (ruleNN_what_it_says.txt), in the
// manner of raft's: each command drives a Core over the scripted
// double, and its output (the transport calls it made, what it reported,
// who holds the blocks) must match the text under the command. Run with
// -rewrite to regenerate the expected text, then read the diff.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

func runScript(t *testing.T, path string) {
	cases := scripttest.Parse(t, path)
	if len(cases) > 0 && strings.Contains(cases[0].Cmd, "async=true") {
		runAsyncScript(t, path, cases)
		return
	}
	var s *srig
	var b strings.Builder
	for _, c := range cases {
		if strings.HasPrefix(c.Cmd, "new") {
			cfg, mod := scriptConfig(t, c)
			s = newSrig(t, cfg, mod)
		}
		require.NotNil(t, s, "%s:%d: start with new", path, c.Line)
		got := runCommand(t, s, c)
		if *scripttest.Rewrite {
			fmt.Fprintf(&b, "%s\n----\n%s\n\n", c.Cmd, got)
			continue
		}
		require.Equal(t, c.Expected, got, "%s:%d: %s", path, c.Line, c.Cmd)
	}
	if *scripttest.Rewrite {
		// Keep the comments: rewrite each case's output in place.
		scripttest.RewriteFile(t, path, cases, b.String())
	}
}

// args parses "k=v" words after the command.
func args(t *testing.T, c scripttest.Case) (string, map[string]string) {
	f := strings.Fields(c.Cmd)
	m := map[string]string{}
	for _, w := range f[1:] {
		k, v, ok := strings.Cut(w, "=")
		require.True(t, ok, "line %d: argument %q is not k=v", c.Line, w)
		m[k] = v
	}
	return f[0], m
}

func atoi(t *testing.T, s string, def int) int {
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

func dur(t *testing.T, s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	require.NoError(t, err)
	return d
}

var codes = map[string]sdk.Code{
	"BUSY": sdk.CodeBusy, "NOT_FOUND": sdk.CodeNotFound, "BACKEND": sdk.CodeBackend,
	"TIMEOUT": sdk.CodeTimeout, "REMOTE_DISCONNECT": sdk.CodeRemoteDisconnect,
}

var kinds = func() map[string]WorkKind {
	m := map[string]WorkKind{}
	for k := WorkPost; k <= WorkClose; k++ {
		m[k.String()] = k
	}
	return m
}()

var states = map[string]sdk.State{"done": sdk.StateDone, "failed": sdk.StateFailed, "canceled": sdk.StateCanceled}

// scriptConfig reads "new [cap=D] [policy=fence|quarantine|reuse]
// [scope=initiated|incoming] [events=true] [cancel=canceled]".
func scriptConfig(t *testing.T, c scripttest.Case) (Config, func(*double)) {
	_, a := args(t, c)
	cfg := Config{HoldCap: dur(t, a["cap"], 0)}
	switch a["policy"] {
	case "quarantine":
		cfg.Escalation = EscalateQuarantine
	case "reuse":
		cfg.Escalation = EscalateReleaseAndReuse
	}
	return cfg, func(d *double) {
		if a["scope"] == "initiated" {
			d.desc.FenceScope = sdk.FenceInitiated
		}
		d.desc.Capabilities.Events = a["events"] == "true"
		if st, ok := states[a["cancel"]]; ok {
			d.cancelTo = st
		}
	}
}

// runCommand runs one command and renders what it did.
func runCommand(t *testing.T, s *srig, c scripttest.Case) string {
	cmd, a := args(t, c)
	before := map[Epoch]int{}
	for e, d := range s.ds {
		before[e] = len(d.calls)
	}
	var errOut error
	var rd Ready
	alerts := len(s.stash.Alerts)
	switch cmd {
	case "new":
	case "connect":
		var notify []int
		if a["notify"] != "" {
			notify = append(notify, atoi(t, a["notify"], 0))
		}
		errOut = s.c.ConnectPeer(peerSpec(a["peer"], atoi(t, a["ranks"], 1), notify...))
		s.settle()
	case "read":
		spec := ReadSpec{Request: RequestID(a["id"]), Token: tok(RequestID(a["id"])), Peer: a["peer"], NotifyProducer: a["notify"] == "true"}
		for k := range atoi(t, a["parts"], 1) {
			spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: mustAllocT(t, s, 1), Rank: k, Remote: []uint32{uint32(k)}})
		}
		errOut = s.c.Read(s.now, spec)
		s.settle()
	case "write":
		spec := WriteSpec{Request: RequestID(a["id"]), Token: tok(RequestID(a["id"])), Peer: a["peer"], Consumers: atoi(t, a["consumers"], 1), Lease: dur(t, a["lease"], 10*time.Second)}
		for k := range atoi(t, a["parts"], 1) {
			spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: mustAllocT(t, s, 1), Rank: k, Remote: []uint32{uint32(k)}})
		}
		errOut = s.c.Write(s.now, spec)
		s.settle()
	case "send":
		errOut = s.c.ExpectSend(s.now, SendSpec{Request: RequestID(a["id"]), Token: tok(RequestID(a["id"])), Peer: a["peer"], Pool: s.pool, Blocks: mustAllocT(t, s, atoi(t, a["blocks"], 1)), Consumers: atoi(t, a["consumers"], 1), Lease: dur(t, a["lease"], 10*time.Second)})
	case "notify":
		// A consumed notification for id arrives from agent from.
		s.d.inbox = append(s.d.inbox, sdk.Notification{From: a["from"], Message: ConsumedMessage(RequestID(a["id"]), tok(RequestID(a["id"])))})
	case "state":
		// state h=N|all|first|last st=done|failed|canceled [code=...]:
		// first and last are the double's oldest and newest live handles.
		st, ok := states[a["st"]]
		require.True(t, ok, "line %d: unknown state %q", c.Line, a["st"])
		var reason error
		if st != sdk.StateDone {
			reason = sdk.Errorf(codeOr(a["code"], sdk.CodeBackend), "double: handle ended %v", st)
		}
		hs := s.d.live()
		switch a["h"] {
		case "all":
		case "first":
			hs = hs[:1]
		case "last":
			hs = hs[len(hs)-1:]
		default:
			hs = []sdk.HandleID{sdk.HandleID(atoi(t, a["h"], 0))}
		}
		for _, h := range hs {
			if !s.d.handles[h].Terminal() {
				s.d.set(h, st, reason)
			}
		}
	case "fail":
		// fail kind=K (whole=CODE | item=N code=CODE) [times=N] [applied=true]
		k, ok := kinds[a["kind"]]
		require.True(t, ok, "line %d: unknown kind %q", c.Line, a["kind"])
		times := atoi(t, a["times"], 1)
		if a["whole"] != "" {
			s.d.failWhole(k, sdk.Errorf(codeOr(a["whole"], 0), "double: injected %s", a["whole"]), times)
			s.d.faults[len(s.d.faults)-1].applied = a["applied"] == "true"
		} else {
			s.d.failItem(k, atoi(t, a["item"], 0), sdk.Errorf(codeOr(a["code"], sdk.CodeBackend), "double: injected"), times)
		}
	case "poll":
		rd = s.poll()
	case "tick":
		s.now = s.now.Add(dur(t, a["d"], 0))
	case "remove":
		errOut = s.c.RemovePeer(s.now, a["peer"])
		s.settle()
	case "kill":
		s.kill(Epoch(atoi(t, a["epoch"], 1)))
	case "attach":
		s.attach(Epoch(atoi(t, a["epoch"], 0)), nil)
	case "close":
		errOut = s.closeCore()
	default:
		t.Fatalf("line %d: unknown command %q", c.Line, cmd)
	}
	var out []string
	es := mapsKeys(s.ds)
	slices.Sort(es)
	for _, e := range es {
		for _, call := range s.ds[e].calls[before[e]:] {
			out = append(out, "call "+call)
		}
	}
	if errOut != nil {
		out = append(out, "error: "+errOut.Error())
	}
	if cmd == "poll" {
		out = append(out, renderReady(rd)...)
	} else if alerts <= len(s.stash.Alerts) {
		for _, a := range s.stash.Alerts[alerts:] {
			out = append(out, fmt.Sprintf("alert %s: %v", a.Kind, a.Err))
		}
	}
	st := s.c.Stats()
	out = append(out, fmt.Sprintf("held: requests=%d live=%d retained=%d peers=%d retired=%d journal=%d native=%+v owners=%s",
		st.Requests, st.Live, st.Retained, st.Peers, st.RetiredPeers, st.Journal, s.d.held(), ownerString(s)))
	return strings.Join(out, "\n")
}

func codeOr(name string, def sdk.Code) sdk.Code {
	if c, ok := codes[name]; ok {
		return c
	}
	return def
}

func mapsKeys[V any](m map[Epoch]V) []Epoch {
	var out []Epoch
	for k := range m {
		out = append(out, k)
	}
	return out
}

func mustAllocT(t *testing.T, s *srig, n int) []uint32 {
	b, err := s.c.Alloc(s.pool, n)
	require.NoError(t, err)
	return b
}

// renderReady prints a Ready's reports and alert kinds.
func renderReady(rd Ready) []string {
	var out []string
	add := func(name string, v any, n int) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%s: %v", name, v))
		}
	}
	add("finished sending", rd.FinishedSending, len(rd.FinishedSending))
	add("finished receiving", rd.FinishedReceiving, len(rd.FinishedReceiving))
	for _, f := range rd.Failed {
		out = append(out, fmt.Sprintf("failed: %s sending=%v code=%v", f.Request, f.Sending, failCode(f.Reason)))
	}
	add("invalid", rd.InvalidBlocks, len(rd.InvalidBlocks))
	add("quarantined", rd.Quarantined, len(rd.Quarantined))
	add("fence", rd.Fence, len(rd.Fence))
	var kinds []string
	for _, a := range rd.Alerts {
		kinds = append(kinds, a.Kind)
	}
	add("alerts", kinds, len(kinds))
	return out
}

// failCode names a failure by core's sentinel or the transport's code.
func failCode(err error) string {
	for _, s := range []error{ErrPeerRemoved, ErrHoldCap, ErrFenced, ErrUnknownOutcome, ErrNotAttached, ErrLeaseExpired} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return sdk.CodeOf(err).String()
}

// ownerString is every block's owner: f free, e engine, t transfer, r
// retained, q quarantined.
func ownerString(s *srig) string {
	var b strings.Builder
	for i := range uint32(8) {
		b.WriteByte("fetrq"[s.c.Owner(BlockRef{s.pool, i})])
	}
	return b.String()
}
