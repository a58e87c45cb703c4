package collector

import (
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// counterFile is one sysfs counter file and the series it feeds.
type counterFile struct {
	path   string
	series *exposition.Series
	scale  float64
}

// addCounters reads counter files into b and returns how many of them are
// gone (their device went away). Unreadable values are skipped.
func addCounters(env Env, r *sysfs.Reader, buf []byte, ctrs []counterFile, b *exposition.Batch) (gone int) {
	for _, ctr := range ctrs {
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
