// Package fixturetree copies the bundled sysfs fixture and scales it to
// N HCAs, for benchmarks and load tests; it also reads the NCCL log
// fixtures into one body (NCCLSampleBody).
package fixturetree

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Copy copies the tree at src (files, directories, symlinks as links) to dst.
func Copy(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case fi.IsDir():
			return os.MkdirAll(target, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, fi.Mode().Perm())
		}
	})
}

// The template HCA of the fixture: mlx5_0, its PCI function and netdev eth0.
const (
	templateDev = "mlx5_0"
	templatePCI = "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
)

// HCAs writes to dst a sysfs tree with n copies of the fixture's mlx5_0
// (named mlx5_0..mlx5_{n-1}, each on its own PCI function with netdev
// eth0..eth{n-1}) and no other RDMA device or netdev. src is the bundled
// fixture (collector/fixtures/sys).
func HCAs(src, dst string, n int) error {
	if n < 1 || n > 64 {
		return fmt.Errorf("n = %d, want 1..64", n)
	}
	pciSrc := filepath.Join(src, templatePCI)
	for i := range n {
		dev := fmt.Sprintf("mlx5_%d", i)
		netdev := fmt.Sprintf("eth%d", i)
		bus := fmt.Sprintf("0000:%02x:00.0", 0x20+i)
		pciRel := fmt.Sprintf("devices/pci0000:%02x/%s", 0x20+i, bus)
		pciDst := filepath.Join(dst, pciRel)
		if err := os.MkdirAll(filepath.Dir(pciDst), 0o755); err != nil {
			return err
		}
		if err := Copy(pciSrc, pciDst); err != nil {
			return err
		}
		// Rename the device and netdev, and point their links at the new function.
		ib := filepath.Join(pciDst, "infiniband")
		if dev != templateDev {
			if err := os.Rename(filepath.Join(ib, templateDev), filepath.Join(ib, dev)); err != nil {
				return err
			}
		}
		if err := relink(filepath.Join(ib, dev, "device"), "../../../"+bus); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(ib, dev, "ports", "1", "gid_attrs", "ndevs", "0"), []byte(netdev+"\n"), 0o644); err != nil {
			return err
		}
		net := filepath.Join(pciDst, "net")
		if netdev != "eth0" {
			if err := os.Rename(filepath.Join(net, "eth0"), filepath.Join(net, netdev)); err != nil {
				return err
			}
		}
		if err := relink(filepath.Join(net, netdev, "device"), "../../../"+bus); err != nil {
			return err
		}
		driver := filepath.Join(dst, "bus", "pci", "drivers", "mlx5_core")
		if err := os.MkdirAll(driver, 0o755); err != nil {
			return err
		}
		rel, _ := filepath.Rel(pciDst, driver)
		if err := relink(filepath.Join(pciDst, "driver"), rel); err != nil {
			return err
		}
		for class, name := range map[string]string{"infiniband": dev, "net": netdev} {
			dir := filepath.Join(dst, "class", class)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			sub := "infiniband/" + dev
			if class == "net" {
				sub = "net/" + netdev
			}
			if err := os.Symlink("../../"+pciRel+"/"+sub, filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

func relink(path, target string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.Symlink(target, path)
}

// Files lists the sysfs files an RDMA scrape reads under root: per port
// state, phys_state, rate, gid_attrs/ndevs/0 and every regular file in
// counters/, counters_ext/ and hw_counters/ (paths through class links).
func Files(root string) ([]string, error) {
	devs, err := os.ReadDir(filepath.Join(root, "class", "infiniband"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range devs {
		ports, err := os.ReadDir(filepath.Join(root, "class", "infiniband", d.Name(), "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			pd := filepath.Join(root, "class", "infiniband", d.Name(), "ports", p.Name())
			for _, f := range []string{"state", "phys_state", "rate", "gid_attrs/ndevs/0"} {
				if _, err := os.Stat(filepath.Join(pd, f)); err == nil {
					out = append(out, filepath.Join(pd, f))
				}
			}
			for _, sub := range []string{"counters", "counters_ext", "hw_counters"} {
				ents, _ := os.ReadDir(filepath.Join(pd, sub))
				for _, e := range ents {
					if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
						out = append(out, filepath.Join(pd, sub, e.Name()))
					}
				}
			}
		}
	}
	return out, nil
}

// Procs writes to dst a /proc with n SGLang scheduler processes (PIDs
// 10000..10000+n-1) copied from the fixture's PID 4310 (src is the bundled
// collector/fixtures/proc), each with a numa_maps of mapsLines lines made
// from the fixture's lines at new addresses, plus the fixture's other
// top-level entries (stat, self).
func Procs(src, dst string, n, mapsLines int) ([]int, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	for _, e := range []string{"stat"} {
		b, err := os.ReadFile(filepath.Join(src, e))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dst, e), b, 0o644); err != nil {
			return nil, err
		}
	}
	tmpl := filepath.Join(src, "4310")
	maps, err := os.ReadFile(filepath.Join(tmpl, "numa_maps"))
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(maps)), "\n") {
		if _, rest, ok := strings.Cut(l, " "); ok {
			lines = append(lines, rest)
		}
	}
	var big strings.Builder
	for i := range mapsLines {
		fmt.Fprintf(&big, "%x %s\n", 0x7f0000000000+uint64(i)*0x200000, lines[i%len(lines)])
	}
	var pids []int
	for i := range n {
		pid := 10000 + i
		d := filepath.Join(dst, fmt.Sprint(pid))
		if err := Copy(tmpl, d); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("sglang::scheduler_TP%d", i)
		for file, content := range map[string]string{"cmdline": name + "\x00", "numa_maps": big.String()} {
			if err := os.WriteFile(filepath.Join(d, file), []byte(content), 0o644); err != nil {
				return nil, err
			}
		}
		for _, file := range []string{"stat", "status"} {
			b, err := os.ReadFile(filepath.Join(d, file))
			if err != nil {
				return nil, err
			}
			s := strings.ReplaceAll(string(b), "4310", fmt.Sprint(pid))
			if err := os.WriteFile(filepath.Join(d, file), []byte(s), 0o644); err != nil {
				return nil, err
			}
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// NCCLSampleBody returns the lines of every NCCL log fixture in dir
// (collector/fixtures/nccl: real samples, each headed by three provenance
// lines, which are left out), for tests and benchmarks that need a large
// realistic log.
func NCCLSampleBody(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no NCCL log fixtures in %s: %v", dir, err)
	}
	var sb strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		lines := strings.SplitAfter(string(b), "\n")
		for _, l := range lines[min(3, len(lines)):] {
			sb.WriteString(l)
		}
	}
	return sb.String(), nil
}
