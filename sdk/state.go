package sdk

import "fmt"

// Op is the direction of a posted transfer, seen from the local agent.
type Op uint8

const (
	// OpRead pulls bytes from the remote descriptors into the local ones.
	OpRead Op = 1
	// OpWrite pushes bytes from the local descriptors into the remote ones.
	OpWrite Op = 2
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Valid reports whether o is OpRead or OpWrite.
func (o Op) Valid() bool { return o == OpRead || o == OpWrite }

// State is what Poll knows of a handle.
type State uint8

const (
	// StateInProgress means bytes may still move. It is also what a transport
	// reports when it cannot tell: the host never guesses.
	StateInProgress State = 1
	// StateDone means every byte is in place at the destination, not merely
	// that the source may be reused.
	StateDone State = 2
	// StateFailed means the transfer ended with an error and no byte of it
	// will move any more. Which bytes arrived is undefined.
	StateFailed State = 3
	// StateCanceled means Cancel was asked and no byte of the transfer will
	// move any more. Which bytes arrived is undefined.
	StateCanceled State = 4
)

func (s State) String() string {
	switch s {
	case StateInProgress:
		return "IN_PROGRESS"
	case StateDone:
		return "DONE"
	case StateFailed:
		return "FAILED"
	case StateCanceled:
		return "CANCELED"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Terminal reports whether no byte of a handle in state s moves any more.
// Only a terminal handle may be released.
func (s State) Terminal() bool {
	return s == StateDone || s == StateFailed || s == StateCanceled
}
