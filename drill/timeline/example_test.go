package timeline_test

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/meridian-mq/meridian/drill/timeline"
)

// sample is a small two-region drill: a partition, then east is killed and
// comes back.
func sample() timeline.Input {
	in := timeline.Input{
		Title:    "drill: partition east|west, then kill region:east",
		Duration: 60,
		Faults: []timeline.Marker{
			{T: 12, Label: "partition east|west"},
			{T: 13, Label: "kill region:east"},
			{T: 38, Label: "heal partition"},
			{T: 40, Label: "restart region:east"},
		},
		Outages: []timeline.Interval{
			{From: 13, To: 17.2, Label: "produce RTO 4.2 s", Kind: "produce"},
			{From: 13, To: 19.6, Label: "consume RTO 6.6 s", Kind: "consume"},
		},
		Notes: []string{
			"partition: iptables owner match",
			"rates are per-second buckets; missing seconds count as 0",
		},
	}
	for s := range 60 {
		east, west := 1180+(s*37)%90, 820+(s*53)%70
		eastC, westC := east-25, west-15
		if s >= 13 && s < 17 {
			west, westC = 0, 0
		}
		if s >= 13 && s < 20 {
			westC = 0
		}
		if s >= 13 && s < 41 { // east is down; its producers fail over to west
			east, eastC = 0, 0
			if s >= 17 {
				west += 900
			}
			if s >= 20 {
				westC = west - 30
			}
		}
		if s != 50 { // a gap in the east series: a missing second counts as 0
			in.Rates = append(in.Rates, timeline.Rate{T: float64(s), Region: "east", Produced: east, Consumed: max(eastC, 0)})
		}
		in.Rates = append(in.Rates, timeline.Rate{T: float64(s), Region: "west", Produced: west, Consumed: max(westC, 0)})
		lagW := int64(5)
		if s >= 12 && s < 41 {
			lagW = int64(s-12) * 1100
		} else if s >= 41 && s < 52 {
			lagW = int64(52-s) * 2900
		}
		in.Lag = append(in.Lag,
			timeline.LagPoint{T: float64(s), Region: "east", Entries: 3},
			timeline.LagPoint{T: float64(s), Region: "west", Entries: lagW})
	}
	return in
}

func ExampleSVG() {
	var b bytes.Buffer
	if err := timeline.SVG(&b, sample()); err != nil {
		fmt.Println(err)
		return
	}
	svg := b.String()
	fmt.Println(strings.Contains(svg, "<svg "), strings.Count(svg, `class="fault"`), strings.Count(svg, `<polyline`))
	// Output: true 4 6
}
