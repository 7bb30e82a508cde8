package simulator

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// StartProgress shows sim's progress on w until the returned stop is
// called: live mpb bars (queued, admitted, holding, paid, ticketed, with
// R and errors) when terminal is true, otherwise one plain line every
// interval. stop waits for the display to finish writing.
func StartProgress(sim *Sim, w io.Writer, terminal bool, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	if !terminal {
		wg.Go(func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					l := sim.Live()
					fmt.Fprintf(w, "t=%4.0fs arrived=%d queued=%d admitted=%d holding=%d paid=%d ticketed=%d done=%d R=%.0f/s errors=%d\n",
						l.Elapsed.Seconds(), l.Arrived, l.Queued, l.Admitted, l.Holding, l.Paid, l.Ticketed, l.Done, l.R, l.Errors)
				}
			}
		})
		return func() { close(done); wg.Wait() }
	}

	p := mpb.New(mpb.WithOutput(w), mpb.WithWidth(48), mpb.WithRefreshRate(250*time.Millisecond), mpb.ForceAutoRefresh())
	bar := func(name string, total int64, extra ...decor.Decorator) *mpb.Bar {
		return p.AddBar(total,
			mpb.PrependDecorators(decor.Name(name, decor.WC{W: 10, C: decor.DindentRight}), decor.CountersNoUnit("%6d / %d", decor.WC{W: 16})),
			mpb.AppendDecorators(extra...))
	}
	l := sim.Live()
	buyers, seats := int64(l.Buyers), int64(l.Seats)
	queued := bar("queued", buyers)
	admitted := bar("admitted", buyers)
	holding := bar("holding", seats)
	paid := bar("paid", seats)
	ticketed := bar("ticketed", seats, decor.Any(func(decor.Statistics) string {
		l := sim.Live()
		return fmt.Sprintf("R %.0f/s  errors %d  %s", l.R, l.Errors, l.Elapsed.Round(time.Second))
	}))
	bars := []*mpb.Bar{queued, admitted, holding, paid, ticketed}
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		totals := []int64{buyers, buyers, seats, seats, seats}
		for {
			l := sim.Live()
			for i, v := range []int64{l.Queued, l.Admitted, l.Holding, l.Paid, l.Ticketed} {
				if v > totals[i] { // more paid than seats when holds expired and were sold again
					totals[i] = v
					bars[i].SetTotal(v, false)
				}
				bars[i].SetCurrent(v)
			}
			select {
			case <-done:
				for _, b := range bars {
					b.SetTotal(-1, true)
				}
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait(); p.Wait() }
}
