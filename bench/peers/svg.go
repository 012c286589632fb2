package main

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// writeSVG draws two bar charts side by side: uncontended cycles/s (linear)
// and hand-off p50 (log scale, with the PING round trip marked).
func (r *report) writeSVG(path string) error {
	const (
		rowH   = 26
		top    = 56
		labelW = 170
		barW   = 250
		panelW = labelW + barW + 70
		width  = 2 * panelW
	)
	height := top + rowH*len(r.libs) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	panel := func(x0 int, title string, val func(lib string) float64, scale func(v float64) float64, label func(v float64) string, ticks []float64, marker float64, markerText string) {
		fmt.Fprintf(&b, `<text x="%d" y="20" font-weight="bold">%s</text>`+"\n", x0+10, html.EscapeString(title))
		axisX := x0 + labelW
		for _, t := range ticks {
			x := float64(axisX) + scale(t)*barW
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dee2e6"/>`+"\n", x, top-8, x, top+rowH*len(r.libs))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#495057" font-size="10">%s</text>`+"\n", x, top-12, label(t))
		}
		if !math.IsNaN(marker) && marker > 0 {
			x := float64(axisX) + scale(marker)*barW
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#2b8a3e" stroke-dasharray="4 3"/>`+"\n", x, top-8, x, top+rowH*len(r.libs))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#2b8a3e" font-size="10">%s</text>`+"\n", x, top+rowH*len(r.libs)+14, html.EscapeString(markerText))
		}
		for i, lib := range r.libs {
			y := top + i*rowH
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", axisX-8, y+16, html.EscapeString(lib.label))
			v := val(lib.id)
			if math.IsNaN(v) {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#868e96">n/a</text>`+"\n", axisX+4, y+16)
				continue
			}
			w := math.Max(1, scale(v)*barW)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", axisX, y+4, w, rowH-8, barColor(lib.id))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(axisX)+w+4, y+16, label(v))
		}
	}

	// Uncontended throughput, linear from 0.
	maxA := 0.0
	for _, l := range r.libs {
		if v := r.agg("A.cycles", l.id, "median"); !math.IsNaN(v) {
			maxA = math.Max(maxA, v)
		}
	}
	ticksA, end := linearTicks(maxA)
	panel(0, "A. Uncontended lock+unlock, cycles/s (higher is better)",
		func(l string) float64 { return r.agg("A.cycles", l, "median") },
		func(v float64) float64 { return v / end },
		func(v float64) string {
			if v >= 1000 {
				return fSig(v/1000) + "k"
			}
			return fInt(v)
		}, ticksA, math.NaN(), "")

	// Hand-off p50, log scale.
	lo, hi := 0.05, 500.0
	logScale := func(v float64) float64 {
		v = math.Min(math.Max(v, lo), hi)
		return (math.Log10(v) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
	}
	panel(panelW, "C. Hand-off latency p50, ms, log scale (lower is better)",
		func(l string) float64 { return r.agg("C.p50", l, "median") },
		logScale, func(v float64) string { return fSig(v) }, []float64{0.1, 1, 10, 100},
		r.ping(-1)/1000, "PING "+fSig(r.ping(-1))+" µs")
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#495057" font-size="10">%s</text>`+"\n", height-8,
		html.EscapeString(fmt.Sprintf("Median of %d run(s), redis-server on loopback; see bench/peers/README.md.", r.runs)))
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// barColor is the color of a library's bars: redisync's stand out, the
// floor is grey.
func barColor(id string) string {
	switch id {
	case mutexRow, globalRow, fairRow:
		return "#c2255c"
	case "floor", "floor-fenced":
		return "#868e96"
	}
	return "#1c7ed6"
}

// linearTicks returns the ticks of a linear axis from 0 that shows values
// up to max, and where the axis ends.
func linearTicks(max float64) (ticks []float64, end float64) {
	if max == 0 {
		max = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(max)))
	if max/step < 3 {
		step /= 2
	}
	for t := 0.0; t <= max*1.05; t += step {
		ticks = append(ticks, t)
	}
	return ticks, ticks[len(ticks)-1] + step
}
