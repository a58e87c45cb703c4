package proc

import (
	"bytes"
)

// NCCL's configuration files. NCCL reads NCCL_CONF_FILE when it is set
// and not empty, else ~/.nccl.conf (the home of getpwuid(getuid())), then
// /etc/nccl.conf, and sets each variable they name with setenv(name,
// value, 0) (NVIDIA/nccl src/misc/param.cc, setEnvFile; ncclOsSetEnv): a
// variable of the environment wins, then the first file that names it,
// then the first line of that file. A line is NAME=VALUE up to its
// newline: no blank trimming, '#' comments only in the first column, a
// line without '=' skipped, name and value cut at 1023 bytes.

// MaxNCCLConf bounds a configuration file the exporter reads.
const MaxNCCLConf = 64 << 10

// ParseNCCLConf calls set for each NAME=VALUE line of a configuration
// file, in order, as NCCL reads it.
func ParseNCCLConf(b []byte, set func(name, value []byte)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if i := bytes.IndexByte(line, 0); i >= 0 {
			line = line[:i] // C strings end at the first NUL
		}
		eq := bytes.IndexByte(line, '=')
		if eq < 0 {
			continue
		}
		name, value := line[:min(eq, 1023)], line[eq+1:]
		value = value[:min(len(value), 1023)]
		set(name, value)
	}
}

// PasswdHome returns the home directory of uid in an /etc/passwd, "" when
// it has no entry.
func PasswdHome(b []byte, uid uint32) string {
	want := []byte(uitoa(uid))
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		f := bytes.Split(line, []byte(":"))
		if len(f) >= 7 && bytes.Equal(f[2], want) {
			return string(f[5])
		}
	}
	return ""
}

func uitoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			return string(b[i:])
		}
	}
}
