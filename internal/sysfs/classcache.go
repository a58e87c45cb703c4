package sysfs

import (
	"os"
	"path/filepath"
)

// ClassCache keeps the structure built for each entry of a sysfs class
// directory (class/infiniband, class/net) between scrapes. An entry is
// rebuilt when its class link points elsewhere (the device was
// re-registered, or a netdev renamed) and dropped, with its open files, when
// it disappears.
type ClassCache[T any] struct {
	dir     string
	reader  *Reader
	entries map[string]*classEntry[T]
}

type classEntry[T any] struct {
	dir, target string
	v           T
}

// NewClassCache returns an empty cache of the class directory dir, whose
// files r reads.
func NewClassCache[T any](dir string, r *Reader) *ClassCache[T] {
	return &ClassCache[T]{dir: dir, reader: r, entries: map[string]*classEntry[T]{}}
}

// Get returns the entry of name, building it with build(dir) when it is new
// or its link changed.
func (c *ClassCache[T]) Get(name string, build func(dir string) (T, error)) (T, error) {
	dir := filepath.Join(c.dir, name)
	target, _ := os.Readlink(dir)
	if e, ok := c.entries[name]; ok {
		if e.target == target {
			return e.v, nil
		}
		c.Drop(name)
	}
	v, err := build(dir)
	if err != nil {
		return v, err
	}
	c.entries[name] = &classEntry[T]{dir: dir, target: target, v: v}
	return v, nil
}

// Drop forgets an entry and closes its files.
func (c *ClassCache[T]) Drop(name string) {
	if e, ok := c.entries[name]; ok {
		c.reader.ForgetPrefix(e.dir)
		delete(c.entries, name)
	}
}

// KeepOnly drops every entry not in seen.
func (c *ClassCache[T]) KeepOnly(seen map[string]bool) {
	for name := range c.entries {
		if !seen[name] {
			c.Drop(name)
		}
	}
}

// Has reports whether name is cached.
func (c *ClassCache[T]) Has(name string) bool {
	_, ok := c.entries[name]
	return ok
}
