package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart ids in report.html: each chart is a <figure id="chart-…"
// class="chart"> holding one inline <svg>.
const (
	ChartThroughput = "chart-throughput"
	ChartAdmission  = "chart-admission"
	ChartLatency    = "chart-latency"
	ChartOutbox     = "chart-outbox"
	ChartQueue      = "chart-queue"
	ChartSeats      = "chart-seats"
	ChartBuyers     = "chart-buyers"
)

// ChartIDs are the ids of the report's charts, in page order.
var ChartIDs = []string{ChartThroughput, ChartAdmission, ChartLatency, ChartOutbox, ChartQueue, ChartSeats, ChartBuyers}

// line is one named series of a chart; points with a negative y (a
// reading that failed) are left out.
type line struct {
	name   string
	y      func(Point) float64
	dashed bool // drawn over others that often coincide with it
}

type chart struct {
	id, title, caption, ylabel string
	lines                      []line
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

func charts() []chart {
	return []chart{
		{ChartThroughput, "Throughput", "Buyers admitted, holds created, payments authorized and orders ticketed per second.", "per second", []line{
			{name: "admitted/s", y: func(p Point) float64 { return p.AdmittedRate }},
			{name: "holds/s", y: func(p Point) float64 { return p.HoldRate }},
			{name: "paid/s", y: func(p Point) float64 { return p.PaidRate }},
			{name: "ticketed/s", y: func(p Point) float64 { return p.TicketedRate }},
		}},
		{ChartAdmission, "Admission rate R against capacity", "R is the waiting room's admission rate (the release controller's rate capped by the organizer); admitted/s is what buyers saw; holds/s is the hold path's demonstrated capacity.", "per second", []line{
			{name: "controller rate", y: func(p Point) float64 { return p.ControllerRate }},
			{name: "admitted/s", y: func(p Point) float64 { return p.AdmittedRate }},
			{name: "capacity used: holds/s", y: func(p Point) float64 { return p.HoldRate }},
			{name: "R (admission rate)", y: func(p Point) float64 { return p.R }, dashed: true},
		}},
		{ChartLatency, "Hold latency", "Percentiles of the hold requests completed in each second, as buyers measured them, and the server's own p99 signal.", "milliseconds", []line{
			{name: "p50", y: func(p Point) float64 { return nonZero(p.HoldP50) }},
			{name: "p95", y: func(p Point) float64 { return nonZero(p.HoldP95) }},
			{name: "p99", y: func(p Point) float64 { return nonZero(p.HoldP99) }},
			{name: "server p99 signal", y: func(p Point) float64 { return p.ServerHoldP99 }},
		}},
		{ChartOutbox, "Outbox age", "Age of the oldest unpublished outbox row, as the release controller reads it: how far the bus lags the database.", "seconds", []line{
			{name: "outbox age", y: func(p Point) float64 { return p.OutboxAge }},
		}},
		{ChartQueue, "Queue length", "Buyers waiting in the waiting room (as the simulator counts them, and as the server reports), and buyers holding seats.", "buyers", []line{
			{name: "queued (buyers)", y: func(p Point) float64 { return float64(p.Queued) }},
			{name: "queued (server)", y: func(p Point) float64 { return float64(p.ServerQueued) }},
			{name: "holding", y: func(p Point) float64 { return float64(p.Holding) }},
			{name: "active holds (server)", y: func(p Point) float64 { return float64(p.ActiveHolds) }},
		}},
		{ChartSeats, "Seat map", "Seats available, held and sold on the public seat map.", "seats", []line{
			{name: "available", y: func(p Point) float64 { return float64(p.SeatsAvailable) }},
			{name: "held", y: func(p Point) float64 { return float64(p.SeatsHeld) }},
			{name: "sold", y: func(p Point) float64 { return float64(p.SeatsSold) }},
		}},
		{ChartBuyers, "Buyers over time", "Cumulative: buyers arrived, admitted, holds created, payments authorized, orders ticketed, and errors (transport errors and unexpected statuses, retried or not).", "buyers", []line{
			{name: "arrived", y: func(p Point) float64 { return float64(p.Arrived) }},
			{name: "admitted", y: func(p Point) float64 { return float64(p.Admitted) }},
			{name: "holds", y: func(p Point) float64 { return float64(p.Holds) }},
			{name: "paid", y: func(p Point) float64 { return float64(p.Paid) }},
			{name: "ticketed", y: func(p Point) float64 { return float64(p.Ticketed) }},
			{name: "errors", y: func(p Point) float64 { return float64(p.Errors) }},
		}},
	}
}

// nonZero hides seconds without samples.
func nonZero(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}

func (c chart) plot(series []Point, chaos []ChaosEvent) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = "seconds since the onsale opened"
	p.Y.Label.Text = c.ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	for i, l := range c.lines {
		var xys plotter.XYs
		for _, pt := range series {
			if y := l.y(pt); y >= 0 {
				xys = append(xys, plotter.XY{X: pt.T, Y: y})
			}
		}
		if len(xys) == 0 {
			continue
		}
		ln, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", c.id, err)
		}
		ln.Color = palette[i%len(palette)]
		ln.Width = vg.Points(1.5)
		if l.dashed {
			ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			ln.Width = vg.Points(2)
		}
		p.Add(ln)
		p.Legend.Add(l.name, ln)
	}
	// Keep the y axis at zero and visible when every value is zero.
	p.Y.Min = 0
	if p.Y.Max <= 0 {
		p.Y.Max = 1
	}
	for _, ev := range chaos {
		if ev.Action != "killed" {
			continue
		}
		mark, err := plotter.NewLine(plotter.XYs{{X: ev.T, Y: 0}, {X: ev.T, Y: p.Y.Max}})
		if err == nil && p.Y.Max > 0 {
			mark.Color = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
			mark.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(mark)
		}
	}
	return p, nil
}

// svgOf renders p as an <svg> element (no XML prolog).
func svgOf(p *plot.Plot, w, h vg.Length) (string, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("render svg: %w", err)
	}
	s := buf.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	return s, nil
}

// WriteReport writes dir/report.html (self-contained: inline SVG charts,
// inline CSS, no scripts, nothing fetched from the network),
// dir/summary.png (the throughput chart) and dir/result.json.
func WriteReport(dir string, r *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report dir: %w", err)
	}
	type figure struct {
		ID, Title, Caption string
		SVG                template.HTML
	}
	var figs []figure
	for i, c := range charts() {
		p, err := c.plot(r.Series, r.Chaos)
		if err != nil {
			return err
		}
		svg, err := svgOf(p, 26*vg.Centimeter, 10*vg.Centimeter)
		if err != nil {
			return err
		}
		figs = append(figs, figure{ID: c.id, Title: c.title, Caption: c.caption, SVG: template.HTML(svg)}) //nolint:gosec // our own SVG
		if i == 0 {
			img := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(24*vg.Centimeter, 12*vg.Centimeter), vgimg.UseDPI(120))}
			p.Draw(draw.New(img))
			var buf bytes.Buffer
			if _, err := img.WriteTo(&buf); err != nil {
				return fmt.Errorf("render png: %w", err)
			}
			if err := os.WriteFile(filepath.Join(dir, "summary.png"), buf.Bytes(), 0o644); err != nil {
				return fmt.Errorf("write summary.png: %w", err)
			}
		}
	}
	var text bytes.Buffer
	if err := r.WriteSummary(&text); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), raw, 0o644); err != nil {
		return fmt.Errorf("write result.json: %w", err)
	}
	var out bytes.Buffer
	err = reportTemplate.Execute(&out, map[string]any{
		"R": r, "S": r.Summary, "Figures": figs, "Text": text.String(),
		"Generated": time.Now().UTC().Format(time.RFC3339), "OK": r.OK(),
	})
	if err != nil {
		return fmt.Errorf("render report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.html"), out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write report.html: %w", err)
	}
	return nil
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(p Percentiles) string { return p.String() },
	"f0":  func(v float64) string { return fmt.Sprintf("%.0f", v) },
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Onsale report — {{.R.Buyers}} buyers, {{.R.Seats}} seats</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
.verdict { display: inline-block; padding: .2rem .6rem; border-radius: 4px; font-weight: 600; }
.ok { background: #d8f3dc; color: #1b4332; } .bad { background: #ffd6d6; color: #7a0000; }
table.summary { border-collapse: collapse; margin: 1rem 0; }
table.summary td { padding: .25rem .8rem; border-bottom: 1px solid #eee; }
table.summary td:first-child { color: #555; }
figure.chart { margin: 1.5rem 0; padding: .5rem; border: 1px solid #ddd; border-radius: 6px; }
figure.chart svg { width: 100%; height: auto; }
figcaption { color: #555; font-size: .9rem; margin-top: .3rem; }
pre { background: #f6f6f6; padding: .8rem; overflow-x: auto; font-size: .8rem; }
</style>
</head>
<body>
<h1>Onsale report</h1>
<p>Event <code>{{.R.EventID}}</code>: {{.R.Buyers}} buyers for {{.R.Seats}} seats, {{.R.Arrival}} arrival over {{.R.Window}}, pay ratio {{.R.PayRatio}}. Generated {{.Generated}}.</p>
<p id="verdict" class="verdict {{if .OK}}ok{{else}}bad{{end}}">{{if .OK}}No seat oversold{{if .R.AuditOK}}; audit passed{{end}}{{else}}Invariant broken{{end}}</p>
<table class="summary" id="summary">
<tr><td>Sold</td><td id="sold">{{.S.Sold}} of {{.R.Seats}} seats</td></tr>
<tr><td>Oversold</td><td id="oversold">{{.S.Oversold}}</td></tr>
<tr><td>Buyers ticketed / declined / abandoned / failed</td><td>{{.S.Ticketed}} / {{.S.Declined}} / {{.S.Abandoned}} / {{.S.Failed}}</td></tr>
<tr><td>Left sold out / gave up / errored</td><td>{{.S.SoldOut}} / {{.S.GaveUp}} / {{.S.Errored}}</td></tr>
<tr><td>Peak throughput</td><td id="peak">{{f0 .S.PeakTicketed}} tickets/s, {{f0 .S.PeakHolds}} holds/s, {{f0 .S.PeakAdmitted}} admissions/s</td></tr>
<tr><td>Queue wait</td><td>{{pct .S.QueueWait}}</td></tr>
<tr><td>Hold latency</td><td>{{pct .S.HoldLatency}}</td></tr>
<tr><td>Time to ticket (first hold request → ticketed)</td><td id="time-to-ticket">{{pct .S.TimeToTicket}}</td></tr>
<tr><td>… hold → PaymentIntent ready</td><td>{{pct .S.IntentWait}}</td></tr>
<tr><td>… card authorized → ticketed</td><td>{{pct .S.PayToTicket}}</td></tr>
<tr><td>Errors</td><td id="errors">{{.S.Errors}}{{range $k, $v := .S.ErrorKinds}} &nbsp; {{$k}}: {{$v}}{{end}}</td></tr>
<tr><td>Admitted / holds / seat conflicts / hold retries (same key)</td><td>{{.S.Admitted}} / {{.S.Holds}} / {{.S.Conflicts}} / {{.S.HoldRetries}}</td></tr>
<tr><td>Duration</td><td>{{.R.Elapsed.Round 1000000000}}</td></tr>
<tr><td>Why R changed (seconds per reason)</td><td id="rate-reasons">{{range $k, $v := .S.RateReasons}}{{$k}}: {{$v}}s &nbsp; {{end}}</td></tr>
</table>
{{range .Figures}}<figure id="{{.ID}}" class="chart">
{{.SVG}}
<figcaption><strong>{{.Title}}.</strong> {{.Caption}}</figcaption>
</figure>
{{end}}
{{if .R.Chaos}}<h2>Chaos</h2><p>Dashed grey lines in the charts mark kills.</p><table class="summary" id="chaos">{{range .R.Chaos}}<tr><td>{{printf "%.1f" .T}}s</td><td>{{.Process}} {{.Action}}</td></tr>{{end}}</table>{{end}}
<h2>Summary</h2>
<pre id="summary-text">{{.Text}}</pre>
{{if .R.Audit}}<h2>Invariant audit</h2>
<pre id="audit">{{.R.Audit}}</pre>{{end}}
</body>
</html>
`))
