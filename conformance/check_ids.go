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
	doc:   "over 100k posts (each released before the next batch) and repeated dlist and region cycles, no id is zero and none is handed out twice",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		seen := make(map[sdk.HandleID]int, idPosts)
		batch := e.maxBatch()
		specs := make([]sdk.PostSpec, batch)
		for i := range specs {
			specs[i] = l.spec(sdk.OpWrite)
		}
		for posted := 0; posted < idPosts; {
			n := min(batch, idPosts-posted)
			ids := l.a.post(specs[:n]...)
			for i, id := range ids {
				if id == 0 {
					e.t.Fatalf("Post number %d returned handle id 0, which means none", posted+i+1)
				}
				if prev, ok := seen[id]; ok {
					e.t.Fatalf("Post number %d returned handle id %d, already returned by post number %d: ids must never be reused", posted+i+1, id, prev)
				}
				seen[id] = posted + i + 1
			}
			l.a.wait(ids...)
			l.a.release(ids...)
			posted += n
		}

		dlists := map[sdk.DlistID]bool{}
		for range 8 {
			specs := make([]sdk.DlistSpec, 128)
			for i := range specs {
				specs[i] = sdk.DlistSpec{Descriptors: []sdk.Descriptor{l.src.desc(0, 1)}}
			}
			ids := l.a.dlists(specs...)
			for _, id := range ids {
				if id == 0 || dlists[id] {
					e.t.Fatalf("PrepareDescriptors returned dlist id %d twice or zero: ids must never be reused", id)
				}
				dlists[id] = true
			}
			l.a.releaseDlists(ids...)
		}

		regions := map[sdk.RegionID]bool{}
		for range 16 {
			r := l.a.region(4096)
			if r.id == 0 || regions[r.id] {
				e.t.Fatalf("RegisterMemory returned region id %d twice or zero: ids must never be reused", r.id)
			}
			regions[r.id] = true
			l.a.deregister(r.id)
		}
	},
}
