package ledger

// Phase is where a request this rank reported stands, from its report
// until the ledger forgets it:
//
//	Pending --fold: every rank's state in, lost or expired--> Resolved
//	Resolved --Resolve returns the outcome--> Returned
//	Returned --no key of it left in the view--> forgotten
//
// Resolution is final: the outcome never changes, and the states record
// that carries this rank's state counts the request done (book.go).
// Once resolved, a request may still name expiries in etcd (expire.go),
// which the lowest live rank deletes once every live rank's state is in.
// So each of Resolved and Returned comes in four phases, by what the last
// fold saw of its expiries:
//
//	(none) --an expiry is live--> Expiring --every live rank in, and
//	this rank the collector--> ExpiryDue --this rank's write deleted
//	them--> ExpiryDeleted --the view saw them go--> (none)
//
// A fold that finds no live expiry goes back to the phase without one, and
// the request is folded no more: nothing that comes later can change what
// this rank owes it. A request whose expiries this rank deleted never
// deletes them again, even if another rank writes one later (its lease
// ends it).
type Phase uint8

const (
	// Pending: some rank's state is neither in, nor excused by the loss of
	// that rank or an expiry.
	Pending Phase = iota
	// Resolved: the union is decided, not yet returned by Resolve.
	Resolved
	// ResolvedExpiring: resolved; an expiry of it is live, and this rank
	// does not delete it (yet): a live rank's state is missing, or a lower
	// rank collects.
	ResolvedExpiring
	// ResolvedExpiryDue: resolved; this rank deletes its expiries with its
	// next write.
	ResolvedExpiryDue
	// ResolvedExpiryDeleted: resolved; this rank deleted its expiries, and
	// its view has yet to see them go.
	ResolvedExpiryDeleted
	// Returned and the three that follow: as the four above, once Resolve
	// has returned the outcome.
	Returned
	ReturnedExpiring
	ReturnedExpiryDue
	ReturnedExpiryDeleted
)

var phaseNames = [...]string{"pending", "resolved", "resolved/expiring", "resolved/expiry-due", "resolved/expiry-deleted",
	"returned", "returned/expiring", "returned/expiry-due", "returned/expiry-deleted"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Phase(?)"
}

// expiryStep is a resolved phase's place among its expiries.
type expiryStep uint8

const (
	noExpiry expiryStep = iota
	expiring
	expiryDue
	expiryDeleted
)

// step is p's expiry step (noExpiry while pending).
func (p Phase) step() expiryStep {
	switch {
	case p == Pending:
		return noExpiry
	case p >= Returned:
		return expiryStep(p - Returned)
	default:
		return expiryStep(p - Resolved)
	}
}

// withStep is the resolved phase p with its expiry step replaced.
func (p Phase) withStep(s expiryStep) Phase {
	if p.returned() {
		return Returned + Phase(s)
	}
	return Resolved + Phase(s)
}

// resolved: the union is decided.
func (p Phase) resolved() bool { return p != Pending }

// returned: Resolve has returned the outcome.
func (p Phase) returned() bool { return p >= Returned }

// expiryLive: the last fold saw an expiry of the request live; until a
// fold sees none, each Resolve folds it again.
func (p Phase) expiryLive() bool { return p.step() != noExpiry }

// expiryDue: this rank deletes the request's expiries with its next write.
func (p Phase) expiryDue() bool { return p.step() == expiryDue }

// folded is the phase of a resolved request after a fold that saw its
// expiries live or not, and whether this rank is to delete them (every
// live rank's state in, and this rank the lowest live one).
func (p Phase) folded(live, collect bool) Phase {
	switch {
	case !live:
		return p.withStep(noExpiry)
	case p.step() == expiryDeleted:
		return p
	case collect:
		return p.withStep(expiryDue)
	default:
		return p.withStep(expiring)
	}
}

// expiriesDeleted is the phase once this rank's write deleted the
// request's expiries.
func (p Phase) expiriesDeleted() Phase { return p.withStep(expiryDeleted) }

// returnedNow is the phase once Resolve returned the outcome.
func (p Phase) returnedNow() Phase {
	if !p.resolved() || p.returned() {
		return p
	}
	return Returned + Phase(p.step())
}
