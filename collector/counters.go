package collector

import (
	"math"

	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// counterFile is one sysfs counter file and the series it feeds.
type counterFile struct {
	path   string
	series *exposition.Series
	scale  float64
	// sum, when set, also counts this counter's increases (an eventSum
	// shared by the counters it adds up); last is its previous raw value.
	sum  *eventSum
	last uint64
	seen bool
}

// eventSum is a counter the exporter keeps: the sum of several kernel
// counters that starts at their sum and then grows by each one's increase
// between two reads, across 32-bit wraps (mlx5 Q counters are 32 bits
// wide), so that a wrap of one of them is not a reset of the sum. It is
// reset with its counters (a device registered again is scanned anew).
type eventSum struct {
	total float64
	read  bool // one of its counters was read in this scrape
}

// add counts a counter's new raw value into its sum.
func (ctr *counterFile) add(v uint64) {
	s := ctr.sum
	s.read = true
	switch {
	case !ctr.seen:
		s.total += float64(v)
	case v >= ctr.last:
		s.total += float64(v - ctr.last)
	case ctr.last <= math.MaxUint32:
		s.total += float64(v + (1 << 32) - ctr.last) // wrapped at 32 bits
	default:
		s.total += float64(v) // a reset of a wider counter
	}
	ctr.last, ctr.seen = v, true
}

// addCounters reads counter files into b and returns how many of them are
// gone (their device went away). Unreadable values are skipped.
func addCounters(env Env, r *sysfs.Reader, buf []byte, ctrs []counterFile, b *exposition.Batch) (gone int) {
	for i := range ctrs {
		ctr := &ctrs[i]
		raw, err := r.Read(ctr.path, buf)
		if err != nil {
			if sysfs.IsGone(err) {
				gone++
			} else {
				skipValue(env, ctr.path, err)
			}
			continue
		}
		v, err := sysfs.ParseUint(raw)
		if err != nil {
			skipValue(env, ctr.path, err)
			continue
		}
		env.Once.Clear(ctr.path)
		b.Add(ctr.series, float64(v)*ctr.scale)
		if ctr.sum != nil {
			ctr.add(v)
		}
	}
	return gone
}

// skipValue records a value that was skipped. Values the driver reports as
// not available ("N/A (no PMA)", EINVAL, empty) are expected and only
// logged; garbage and failed reads also count in
// fabric_scrape_read_errors_total.
func skipValue(env Env, path string, err error) {
	if !sysfs.IsNotAvailable(err) {
		env.ReadErrors.Inc()
	}
	env.Once.Debug(path, "msg", "skipping value", "path", path, "err", err)
}
