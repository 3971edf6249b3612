package host

import "github.com/custody-dev/custody/core"

// Finished accumulates core's finished reports until the engine fetches them
// (GetFinished), so no round's report is lost between two fetches.
type Finished struct {
	FinishedSending   []core.RequestID
	FinishedReceiving []core.RequestID
	Failed            []core.Failure
	InvalidBlocks     []core.BlockRef
	Quarantined       []core.BlockRef
}

func (r *Finished) add(rd core.Ready) {
	r.FinishedSending = append(r.FinishedSending, rd.FinishedSending...)
	r.FinishedReceiving = append(r.FinishedReceiving, rd.FinishedReceiving...)
	r.Failed = append(r.Failed, rd.Failed...)
	r.InvalidBlocks = append(r.InvalidBlocks, rd.InvalidBlocks...)
	r.Quarantined = append(r.Quarantined, rd.Quarantined...)
}

// take returns the accumulated report and starts a new one.
func (r *Finished) take() Finished {
	out := *r
	*r = Finished{}
	return out
}
