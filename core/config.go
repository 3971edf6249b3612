package core

import (
	"fmt"
	"time"
)

// DefaultHoldCap is how long a handle may stay non-terminal (live, retained
// or retired) before it is escalated (rule 8): two minutes, long past any
// transfer that still makes progress.
const DefaultHoldCap = 120 * time.Second

// DefaultBatch is the most items core puts in one batched transport call
// when the transport states no MaxItemsPerCall.
const DefaultBatch = 1024

// EscalationPolicy says what core does with a handle held past the cap.
type EscalationPolicy uint8

const (
	// EscalateFence (the default) asks the caller to fence the handle's
	// transport epoch (Ready.Fence). Once the caller reports the epoch fenced
	// (Fenced), every handle of that epoch is terminal and its blocks are safe.
	EscalateFence EscalationPolicy = iota
	// EscalateQuarantine is for transports that cannot be fenced: the handle is
	// forgotten without proof that it stopped (an Alert of error level says
	// so), and its blocks are quarantined, never handed back for reuse.
	EscalateQuarantine
	// EscalateReleaseAndReuse forgets the handle and hands its blocks back as
	// invalid, so the engine reuses them. A transfer
	// still running may corrupt the next owner of those blocks; choose it only
	// knowingly.
	EscalateReleaseAndReuse
)

func (p EscalationPolicy) String() string {
	switch p {
	case EscalateFence:
		return "fence"
	case EscalateQuarantine:
		return "quarantine"
	case EscalateReleaseAndReuse:
		return "release-and-reuse"
	}
	return fmt.Sprintf("EscalationPolicy(%d)", uint8(p))
}

// Config tunes a Core. The zero value is valid and means the defaults.
type Config struct {
	// HoldCap bounds how long a handle may stay non-terminal before it is
	// escalated; zero means DefaultHoldCap.
	HoldCap time.Duration
	// Escalation is what happens past HoldCap; the zero value is
	// EscalateFence.
	Escalation EscalationPolicy
	// Batch caps the items of one batched transport call; zero means the
	// transport's MaxItemsPerCall, or DefaultBatch if it states none.
	Batch int
	// MaxEarlyNotifications bounds the requests whose notifications core
	// keeps while their request is not registered yet: consumed ones for
	// sends (a consumer may notify before the producer's ExpectSend) and
	// written ones for push receives (a producer may finish before the
	// consumer's ExpectReceive); zero means 4096. Past it, notifications of
	// further requests are dropped with an Alert. It also bounds how many
	// reported sends and receives core remembers so as to drop their late or
	// duplicated notifications (an id reused for a new request within that
	// many reports gets no early notifications: they count only once it is
	// registered).
	MaxEarlyNotifications int
	// MaxRecentRequests bounds how many reported requests core remembers
	// by id, token and kind, so that a call repeating one (a retry of a
	// call whose reply was lost, after its request was reported) is
	// refused with ErrDuplicate instead of taken as a new request; zero
	// means DefaultMaxRecentRequests. A retry later than that many reports
	// is taken as new.
	MaxRecentRequests int
	// EarlyNotificationAge bounds how long a notification whose request is
	// not registered yet is kept; zero means DefaultEarlyNotificationAge.
	// Older ones are dropped, so stale ones neither fill
	// MaxEarlyNotifications nor finish a later request under the same id.
	EarlyNotificationAge time.Duration
	// WedgedAfter is how many consecutive transport calls may time out
	// (sdk.CodeTimeout) before core asks for a fence of the transport's
	// epoch (Ready.Fence): a wedged transport is fenced, never waited on;
	// zero means DefaultWedgedAfter.
	WedgedAfter int
}

// DefaultWedgedAfter is Config.WedgedAfter's default.
const DefaultWedgedAfter = 3

func (c Config) withDefaults() (Config, error) {
	if c.HoldCap < 0 {
		return c, fmt.Errorf("core: Config.HoldCap is %v; it must be positive, or zero for the default %v", c.HoldCap, DefaultHoldCap)
	}
	if c.HoldCap == 0 {
		c.HoldCap = DefaultHoldCap
	}
	if c.Escalation > EscalateReleaseAndReuse {
		return c, fmt.Errorf("core: Config.Escalation is %v; use EscalateFence, EscalateQuarantine or EscalateReleaseAndReuse", c.Escalation)
	}
	if c.Batch < 0 {
		return c, fmt.Errorf("core: Config.Batch is %d; it must be positive, or zero for the transport's limit", c.Batch)
	}
	if c.MaxEarlyNotifications < 0 {
		return c, fmt.Errorf("core: Config.MaxEarlyNotifications is %d; it must be positive, or zero for 4096", c.MaxEarlyNotifications)
	}
	if c.EarlyNotificationAge < 0 {
		return c, fmt.Errorf("core: Config.EarlyNotificationAge is %v; it must be positive, or zero for the default %v", c.EarlyNotificationAge, DefaultEarlyNotificationAge)
	}
	if c.WedgedAfter < 0 {
		return c, fmt.Errorf("core: Config.WedgedAfter is %d; it must be positive, or zero for the default %d", c.WedgedAfter, DefaultWedgedAfter)
	}
	if c.WedgedAfter == 0 {
		c.WedgedAfter = DefaultWedgedAfter
	}
	if c.EarlyNotificationAge == 0 {
		c.EarlyNotificationAge = DefaultEarlyNotificationAge
	}
	if c.MaxEarlyNotifications == 0 {
		c.MaxEarlyNotifications = 4096
	}
	if c.MaxRecentRequests < 0 {
		return c, fmt.Errorf("core: Config.MaxRecentRequests is %d; it must be positive, or zero for %d", c.MaxRecentRequests, DefaultMaxRecentRequests)
	}
	if c.MaxRecentRequests == 0 {
		c.MaxRecentRequests = DefaultMaxRecentRequests
	}
	return c, nil
}
