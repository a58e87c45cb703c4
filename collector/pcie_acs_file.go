package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/fabric-exporter/fabric_exporter/internal/sysfs"
)

// The ACS registers of PCI bridges, read by a privileged one-shot step and
// kept in a file that the unprivileged exporter reads: the kernel gives a
// reader without CAP_SYS_ADMIN only the first 64 bytes of a function's
// configuration space (pci_read_config, drivers/pci/pci-sysfs.c), and ACS
// lives in the extended space. `fabric_exporter dump-acs --output=FILE`
// (run with CAP_SYS_ADMIN: a Kubernetes init container or sidecar,
// deploy/kubernetes/components/pcie-acs-reader) writes, for every PCI
// bridge (class 0x0604) of --path.sysfs:
//
//	# fabric_exporter dump-acs v1
//	time 1764745200
//	0000:17:01.0 4096 cap=005f ctl=001d
//	0000:16:00.0 4096 none
//	0000:15:01.0 64 -
//
// one line per bridge: its PCI address, the bytes of its configuration
// space the reader got, and the ACS capability and control registers
// (hex), "none" when its extended capability list has no ACS, "-" when
// the extended space could not be read (fewer than 4096 bytes: the reader
// lacked the privilege, or conventional PCI). The pcie collector
// (--collector.pcie.acs-file=FILE) uses a bridge's line where it cannot
// read the extended space itself; a bridge missing from the file (the PCI
// tree changed after the dump) stays unknown. The file is replaced
// atomically (a temporary file renamed over it); the collector looks at
// its modification time every scrape and reads it again when it changed.

// PCIeOptions configures the pcie collector.
type PCIeOptions struct {
	// ACSFile is the dump-acs output to read ACS from where the extended
	// configuration space is not readable ("" = none).
	ACSFile string
}

func pcieFlags(app *kingpin.Application, o *Options) {
	app.Flag("collector.pcie.acs-file", "File written by `fabric_exporter dump-acs` (run with CAP_SYS_ADMIN, e.g. as an init container): the ACS registers of the PCI bridges whose extended configuration space this exporter cannot read itself (it gets 64 bytes without CAP_SYS_ADMIN). Read when it changes; bridges it lacks stay unknown. Empty: none.").
		PlaceHolder("FILE").StringVar(&o.PCIe.ACSFile)
}

const acsFileHeader = "# fabric_exporter dump-acs v1"

// acsFileEntry is one bridge of an ACS file.
type acsFileEntry struct {
	bytes    int
	extended bool // the extended space was read: found, cap, ctl mean something
	found    bool // an ACS capability
	cap, ctl uint16
}

// acsDump is an ACS file's content.
type acsDump struct {
	time    time.Time
	bridges map[string]acsFileEntry
}

// maxACSFile bounds what is read of an ACS file (a line is about 40 bytes;
// a large server has a few hundred bridges).
const maxACSFile = 1 << 20

// parseACSFile reads an ACS file; any line it does not understand makes
// the whole file an error (it is written by this program).
func parseACSFile(b []byte) (acsDump, error) {
	d := acsDump{bridges: map[string]acsFileEntry{}}
	if len(b) > maxACSFile {
		return d, fmt.Errorf("%w: ACS file of %d bytes", sysfs.ErrGarbage, len(b))
	}
	line, rest, _ := bytes.Cut(b, []byte{'\n'})
	if string(bytes.TrimSpace(line)) != acsFileHeader {
		return d, fmt.Errorf("%w: ACS file does not start with %q", sysfs.ErrGarbage, acsFileHeader)
	}
	sawTime := false
	for n := 2; len(rest) > 0; n++ {
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		f := strings.Fields(string(line))
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func() (acsDump, error) {
			return acsDump{bridges: map[string]acsFileEntry{}}, fmt.Errorf("%w: ACS file line %d: %q", sysfs.ErrGarbage, n, sysfs.Truncate(line, 64))
		}
		if f[0] == "time" {
			if len(f) != 2 || sawTime {
				return bad()
			}
			s, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || s < 0 {
				return bad()
			}
			d.time, sawTime = time.Unix(s, 0), true
			continue
		}
		if len(f) < 3 || !isBDF(f[0]) {
			return bad()
		}
		e := acsFileEntry{}
		v, err := strconv.Atoi(f[1])
		if err != nil || v < 0 || v > sysfs.PCIConfigExtended {
			return bad()
		}
		e.bytes = v
		switch {
		case len(f) == 3 && f[2] == "-":
		case len(f) == 3 && f[2] == "none" && v == sysfs.PCIConfigExtended:
			e.extended = true
		case len(f) == 4 && v == sysfs.PCIConfigExtended && strings.HasPrefix(f[2], "cap=") && strings.HasPrefix(f[3], "ctl="):
			c, err1 := strconv.ParseUint(f[2][4:], 16, 16)
			t, err2 := strconv.ParseUint(f[3][4:], 16, 16)
			if err1 != nil || err2 != nil {
				return bad()
			}
			e.extended, e.found, e.cap, e.ctl = true, true, uint16(c), uint16(t)
		default:
			return bad()
		}
		if _, dup := d.bridges[f[0]]; dup {
			return bad()
		}
		d.bridges[f[0]] = e
	}
	if !sawTime {
		return acsDump{bridges: map[string]acsFileEntry{}}, fmt.Errorf("%w: ACS file has no time line", sysfs.ErrGarbage)
	}
	return d, nil
}

// DumpPCIACS reads the configuration space of every PCI bridge (class
// 0x0604) under sysfsRoot's bus/pci/devices and returns the ACS file's
// content, stamped now. It needs CAP_SYS_ADMIN to say anything about ACS.
func DumpPCIACS(sysfsRoot string, now time.Time) ([]byte, error) {
	dir := filepath.Join(sysfsRoot, "bus", "pci", "devices")
	names, err := sysfs.ListDir(dir, false)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\ntime %d\n", acsFileHeader, now.Unix())
	for _, bdf := range names {
		if !isBDF(bdf) || !strings.HasPrefix(sysfs.ReadSmall(sysfsRoot, filepath.Join(dir, bdf, "class")), "0x0604") {
			continue
		}
		cfg, err := readConfig(filepath.Join(dir, bdf, "config"))
		if err != nil {
			if sysfs.IsGone(err) {
				continue
			}
			return nil, fmt.Errorf("%s: %w", bdf, err)
		}
		acs, found, err := sysfs.ParsePCIACS(cfg)
		switch {
		case errors.Is(err, sysfs.ErrNoExtendedConfig):
			fmt.Fprintf(&b, "%s %d -\n", bdf, len(cfg))
		case err != nil:
			return nil, fmt.Errorf("%s: %w", bdf, err)
		case !found:
			fmt.Fprintf(&b, "%s %d none\n", bdf, len(cfg))
		default:
			fmt.Fprintf(&b, "%s %d cap=%04x ctl=%04x\n", bdf, len(cfg), acs.Cap, acs.Control)
		}
	}
	return b.Bytes(), nil
}

// WriteFileAtomic replaces path with b: a temporary file in the same
// directory, readable by all (the exporter runs as another user), renamed
// over it.
func WriteFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// acsFile is the collector's view of --collector.pcie.acs-file.
type acsFile struct {
	path    string
	mod     time.Time // modification time of the content read
	size    int64
	dump    acsDump
	ok      bool // dump holds a parsed file
	checked bool
}

// refresh reads the file again when its modification time or size
// changed; it reports whether the bridges it holds changed. A missing file
// is no error (the reader has not run yet); a bad one is.
func (a *acsFile) refresh() (changed bool, err error) {
	if a.path == "" {
		return false, nil
	}
	fi, err := os.Stat(a.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			changed = a.ok
			a.ok, a.dump, a.checked, a.mod = false, acsDump{}, true, time.Time{}
			return changed, nil
		}
		return false, err
	}
	if a.checked && fi.ModTime().Equal(a.mod) && fi.Size() == a.size {
		return false, nil
	}
	a.checked, a.mod, a.size = true, fi.ModTime(), fi.Size()
	f, err := os.Open(a.path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxACSFile+1))
	if err != nil {
		return false, err
	}
	d, err := parseACSFile(b)
	if err != nil {
		changed = a.ok
		a.ok, a.dump = false, acsDump{}
		return changed, err
	}
	changed = !a.ok || !sameBridges(a.dump.bridges, d.bridges)
	a.ok, a.dump = true, d
	return changed, nil
}

func sameBridges(x, y map[string]acsFileEntry) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w != v {
			return false
		}
	}
	return true
}
