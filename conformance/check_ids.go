package conformance

import (
	"github.com/custody-dev/custody/sdk"
)

// idPosts is how many handles the ids check asks for.
const idPosts = 100_000

// checkIDsNeverReused: no id is handed out twice, even after the resource
// it named was released, and none is zero.
var checkIDsNeverReused = check{
	name:  "contract/ids-never-reused",
	doc:   "over 100k posts (each released before the next batch) and repeated dlist, region and peer cycles, no id is zero and none is handed out twice, whatever kind it named",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		// One map for every kind: an id is never reused, whatever kind it
		// named (sdk/doc.go), so a region may not take a released handle's
		// id either.
		seen := make(map[uint64]string, idPosts+1024)
		issued := func(what string, id uint64) {
			e.t.Helper()
			if id == 0 {
				e.t.Fatalf("%s returned id 0, which means none", what)
			}
			if prev, ok := seen[id]; ok {
				e.t.Fatalf("%s returned id %d, already returned as %s: ids must never be reused, whatever kind they name", what, id, prev)
			}
			seen[id] = what
		}
		issued("RegisterMemory (link source region)", uint64(l.src.ID))
		issued("LoadPeers (link peer)", uint64(l.peer))
		issued("PrepareDescriptors (link local dlist)", uint64(l.ld))
		issued("PrepareDescriptors (link remote dlist)", uint64(l.rd))
		batch := e.maxBatch()
		specs := make([]sdk.PostSpec, batch)
		for i := range specs {
			specs[i] = l.spec(sdk.OpWrite)
		}
		for posted := 0; posted < idPosts; {
			n := min(batch, idPosts-posted)
			ids := l.a.post(specs[:n]...)
			for i, id := range ids {
				issued("Post number "+itoa(uint64(posted+i+1))+" (handle)", uint64(id))
			}
			l.a.wait(ids...)
			l.a.release(ids...)
			posted += n
		}

		for k := range 8 {
			specs := make([]sdk.DlistSpec, 128)
			for i := range specs {
				specs[i] = sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(0, 1)}}
			}
			ids := l.a.dlists(specs...)
			for i, id := range ids {
				issued("PrepareDescriptors round "+itoa(uint64(k))+" item "+itoa(uint64(i))+" (dlist)", uint64(id))
			}
			l.a.releaseDlists(ids...)
		}

		for k := range 16 {
			r := l.a.region(4096)
			issued("RegisterMemory round "+itoa(uint64(k))+" (region)", uint64(r.ID))
			l.a.deregister(r.ID)
		}

		// Peers last: the link's peer must be free to load b again.
		l.a.releaseDlists(l.ld, l.rd)
		l.a.unloadPeer(l.peer)
		for k := range 8 {
			p := l.a.loadPeer(l.b)
			issued("LoadPeers round "+itoa(uint64(k))+" (peer)", uint64(p))
			l.a.unloadPeer(p)
		}
	},
}
