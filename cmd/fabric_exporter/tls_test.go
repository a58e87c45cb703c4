package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// writeSelfSigned writes a certificate and key for 127.0.0.1 into dir.
func writeSelfSigned(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fabric_exporter test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// --web.config.file (exporter-toolkit): TLS and basic auth. The right
// password gets the metrics over TLS; a wrong one, none or plain HTTP do not.
func TestWebConfigTLSBasicAuth(t *testing.T) {
	dir := t.TempDir()
	pool := writeSelfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: " + string(hash) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "web-config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	checkTLSBasicAuth(t, pool, filepath.Join(dir, "web-config.yml"), "prometheus", "s3cret")
}

// The example deploy/web-config.yml works as documented: its hash is of the
// password "changeme" (its comment says so), with a test certificate in
// place of its certificate paths.
func TestWebConfigExample(t *testing.T) {
	dir := t.TempDir()
	pool := writeSelfSigned(t, dir)
	b, err := os.ReadFile("../../deploy/web-config.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for from, to := range map[string]string{"/etc/fabric_exporter/tls.crt": filepath.Join(dir, "cert.pem"), "/etc/fabric_exporter/tls.key": filepath.Join(dir, "key.pem")} {
		if !strings.Contains(cfg, from) {
			t.Fatalf("deploy/web-config.yml lacks %s", from)
		}
		cfg = strings.ReplaceAll(cfg, from, to)
	}
	if err := os.WriteFile(filepath.Join(dir, "web-config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	checkTLSBasicAuth(t, pool, filepath.Join(dir, "web-config.yml"), "prometheus", "changeme")
}

// checkTLSBasicAuth runs the exporter with the web config file cfgPath: user
// and pass get the metrics over TLS; a wrong password, none or plain HTTP do not.
func checkTLSBasicAuth(t *testing.T, pool *x509.CertPool, cfgPath, user, pass string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	get := func(addr, user, pass string) (int, string) {
		req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	addr, _ := startExporterWith(t, func(addr string) bool { code, _ := get(addr, user, pass); return code == 200 },
		"--path.sysfs="+fixtureSys, "--web.config.file="+cfgPath)

	if code, body := get(addr, user, pass); code != 200 || !strings.Contains(body, "fabric_rail_info") {
		t.Errorf("right password: %d", code)
	}
	if code, _ := get(addr, user, "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	if code, _ := get(addr, "", ""); code != http.StatusUnauthorized {
		t.Errorf("no password: %d, want 401", code)
	}
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		if resp.StatusCode == 200 {
			t.Error("plain HTTP served metrics")
		}
		resp.Body.Close()
	}
}
