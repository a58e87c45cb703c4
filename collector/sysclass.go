package collector

import (
	"github.com/fabric-exporter/fabric_exporter/internal/exposition"
	"os"
	"path/filepath"
)

// counterFile is one sysfs counter file and the series it feeds.
type counterFile struct {
	path   string
	series *exposition.Series
	scale  float64
}

// classCache keeps the structure built for each entry of a sysfs class
// directory (class/infiniband, class/net) between scrapes. An entry is
// rebuilt when its class link points elsewhere (the device was
// re-registered, or a netdev renamed) and dropped, with its open files, when
// it disappears.
type classCache[T any] struct {
	dir     string
	reader  *sysReader
	entries map[string]*classEntry[T]
}

type classEntry[T any] struct {
	dir, target string
	v           T
}

func newClassCache[T any](dir string, r *sysReader) *classCache[T] {
	return &classCache[T]{dir: dir, reader: r, entries: map[string]*classEntry[T]{}}
}

// get returns the entry of name, building it with build(dir) when it is new
// or its link changed.
func (c *classCache[T]) get(name string, build func(dir string) (T, error)) (T, error) {
	dir := filepath.Join(c.dir, name)
	target, _ := os.Readlink(dir)
	if e, ok := c.entries[name]; ok {
		if e.target == target {
			return e.v, nil
		}
		c.drop(name)
	}
	v, err := build(dir)
	if err != nil {
		return v, err
	}
	c.entries[name] = &classEntry[T]{dir: dir, target: target, v: v}
	return v, nil
}

// drop forgets an entry and closes its files.
func (c *classCache[T]) drop(name string) {
	if e, ok := c.entries[name]; ok {
		c.reader.forgetPrefix(e.dir)
		delete(c.entries, name)
	}
}

// keepOnly drops every entry not in seen.
func (c *classCache[T]) keepOnly(seen map[string]bool) {
	for name := range c.entries {
		if !seen[name] {
			c.drop(name)
		}
	}
}

// has reports whether name is cached (for tests).
func (c *classCache[T]) has(name string) bool {
	_, ok := c.entries[name]
	return ok
}

// addCounters reads counter files into b and returns how many of them are
// gone (their device went away). Unreadable values are skipped.
func addCounters(env Env, r *sysReader, buf []byte, ctrs []counterFile, b *exposition.Batch) (gone int) {
	for _, ctr := range ctrs {
		raw, err := r.read(ctr.path, buf)
		if err != nil {
			if isGone(err) {
				gone++
			} else {
				skipValue(env, ctr.path, err)
			}
			continue
		}
		v, err := parseSysfsUint(raw)
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
	if !isNotAvailable(err) {
		env.ReadErrors.Inc()
	}
	env.Once.Debug(path, "msg", "skipping value", "path", path, "err", err)
}
