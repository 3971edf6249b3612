// Package h2peek reads what one end of an HTTP/2 connection announces about
// flow control, for tests of the gRPC options custody's engine API sets.
package h2peek

import (
	"fmt"
	"io"

	"golang.org/x/net/http2"
)

// Windows sends the peer on rw an empty SETTINGS frame (the caller has
// handled the client preface) and reads the peer's frames until it
// acknowledges it. gRPC writes its own SETTINGS, and a connection-level
// WINDOW_UPDATE when its window is larger than the protocol's, as soon as
// the connection opens, so both come before that acknowledgement. Windows
// returns the per-stream initial window the peer announced (0: none, so
// the protocol's 65535 applies) and its connection window (65535 plus its
// updates). It reads at most 16 frames.
func Windows(rw io.ReadWriter) (stream, conn uint32, err error) {
	fr := http2.NewFramer(rw, rw)
	if err := fr.WriteSettings(); err != nil {
		return 0, 0, fmt.Errorf("h2peek: %w", err)
	}
	conn = 65535
	for range 16 {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, 0, fmt.Errorf("h2peek: %w", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				return stream, conn, nil
			}
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				stream = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn += f.Increment
			}
		}
	}
	return 0, 0, fmt.Errorf("h2peek: no acknowledgement of SETTINGS in 16 frames")
}
