package ucx_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// BenchmarkIdleCPU measures what two idle transport processes (the plugin
// binary) burn: both open, each with a region, one with the other loaded
// as a peer and a dlist pair prepared, after one 1 MiB WRITE moved and was
// released, so that nothing is in flight. It reports each process's CPU
// time over idleWindow as a percentage of one core (initiator-core%,
// target-core%), read from /proc/PID/stat.
func BenchmarkIdleCPU(b *testing.B) {
	const idleWindow = 10 * time.Second
	const size = 1 << 20
	path := pluginBinary(b)
	for _, tls := range tlsSettings {
		b.Run(tls, func(b *testing.B) {
			b.Setenv("UCX_TLS", tls)
			ctx := b.Context()
			dir := b.TempDir()
			var pls [2]*plugin.Plugin
			var regs [2]sdk.RegionID
			for i, name := range []string{"initiator", "target"} {
				pl, err := plugin.Launch(ctx, path, plugin.LaunchOptions{})
				require.NoError(b, err)
				b.Cleanup(pl.Stop)
				pls[i] = pl
				require.NoError(b, pl.Open(ctx, sdk.OpenRequest{Agent: name, Params: map[string]string{"tls": tls}}))
				file := filepath.Join(dir, name)
				mapFile(b, file, size)
				reg, err := pl.RegisterMemory(ctx, []sdk.Region{{Path: file, Length: size, Kind: sdk.MemoryHost}})
				require.NoError(b, err)
				require.NoError(b, reg[0].Err)
				regs[i] = reg[0].ID
			}
			a, t := pls[0], pls[1]
			md, err := t.LocalMetadata(ctx)
			require.NoError(b, err)
			peers, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "target", Metadata: md}})
			require.NoError(b, err)
			require.NoError(b, peers[0].Err)
			dl, err := a.PrepareDescriptors(ctx, []sdk.DlistSpec{
				{Descriptors: []sdk.Descriptor{{Region: regs[0], Length: size}}},
				{Peer: peers[0].ID, Descriptors: []sdk.Descriptor{{Region: regs[1], Length: size}}},
			})
			require.NoError(b, err)
			posted, err := a.Post(ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: dl[0].ID, LocalIndices: []uint32{0}, Remote: dl[1].ID, RemoteIndices: []uint32{0}}})
			require.NoError(b, err)
			require.NoError(b, posted[0].Err)
			for {
				sts, err := a.Poll(ctx, []sdk.HandleID{posted[0].ID})
				require.NoError(b, err)
				require.NoError(b, sts[0].Err)
				if sts[0].State.Terminal() {
					require.Equal(b, sdk.StateDone, sts[0].State)
					break
				}
			}
			errs, err := a.Release(ctx, []sdk.HandleID{posted[0].ID})
			require.NoError(b, err)
			require.NoError(b, errs[0])
			var pa, pt float64
			for b.Loop() {
				ca0, ct0 := cpuTicks(b, a.Pid()), cpuTicks(b, t.Pid())
				start := time.Now()
				time.Sleep(idleWindow) // the measurement window itself
				ca1, ct1 := cpuTicks(b, a.Pid()), cpuTicks(b, t.Pid())
				el := time.Since(start).Seconds()
				pa = 100 * float64(ca1-ca0) / clockTicks / el
				pt = 100 * float64(ct1-ct0) / clockTicks / el
			}
			b.ReportMetric(pa, "initiator-core%")
			b.ReportMetric(pt, "target-core%")
			errs, err = a.ReleaseDescriptors(ctx, []sdk.DlistID{dl[0].ID, dl[1].ID})
			require.NoError(b, err)
			require.NoError(b, errs[0])
			errs, err = a.UnloadPeers(ctx, []sdk.PeerID{peers[0].ID})
			require.NoError(b, err)
			require.NoError(b, errs[0])
			for i, pl := range pls {
				errs, err := pl.DeregisterMemory(ctx, []sdk.RegionID{regs[i]})
				require.NoError(b, err)
				require.NoError(b, errs[0])
				require.NoError(b, pl.Close(ctx))
			}
		})
	}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on
// Linux for every architecture Go supports here).
const clockTicks = 100

// cpuTicks is utime+stime of process pid (fields 14 and 15 of its stat).
func cpuTicks(tb testing.TB, pid int) uint64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3: utime (14) is f[11], stime (15) f[12].
	ut, err := strconv.ParseUint(f[11], 10, 64)
	require.NoError(tb, err)
	st, err := strconv.ParseUint(f[12], 10, 64)
	require.NoError(tb, err)
	return ut + st
}
