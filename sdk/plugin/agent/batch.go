package agent

import "fmt"

// One returns the single result of a batched call of one item.
func One[T any](res []T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	if len(res) != 1 {
		return zero, fmt.Errorf("transport returned %d results for 1 item", len(res))
	}
	return res[0], nil
}

// FirstErr returns the call's error, else the item's.
func FirstErr(call, item error) error {
	if call != nil {
		return call
	}
	return item
}
