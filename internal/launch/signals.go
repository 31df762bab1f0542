package launch

import (
	"os"
	"os/signal"
)

// NotifyStops subscribes c to the StopSignals (signal.Notify), before the
// launcher starts any rank, except the ones the launcher was started with
// ignored: under nohup SIGHUP is ignored, and a shell ignores SIGINT for a
// job it starts in the background of a script. Subscribing would undo
// that (Go then catches the signal), so a launcher under nohup would stop
// its job when the terminal closes. Those signals stay ignored, and the
// ranks inherit that, as any command's children do. (Go's runtime keeps
// only SIGHUP and SIGINT ignored this way; it handles SIGQUIT whatever.)
func NotifyStops(c chan<- os.Signal) {
	for _, sig := range StopSignals {
		if !signal.Ignored(sig) {
			signal.Notify(c, sig)
		}
	}
}
