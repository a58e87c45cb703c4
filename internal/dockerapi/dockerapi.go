// Package dockerapi is the one request the exporter makes to the Docker
// Engine API (and Podman's Docker-compatible API): inspect a container, for
// its name and its main process. It replaces the Docker client module,
// whose dependency graph (OpenTelemetry, OCI image specs, containerd's
// error types) made up a tenth of the exporter's binary for one GET.
//
// The request is GET /containers/{id}/json without a version prefix: the
// daemon then answers in its own current API version, so no negotiation is
// needed and no daemon refuses the request as too old (Docker Engine 29.0
// raised its minimum API version to 1.44). Only the fields read here are decoded;
// they exist unchanged in every API version.
package dockerapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotFound is a container the daemon does not know (another runtime's,
// or removed).
var ErrNotFound = errors.New("no such container")

// Container is what an inspection returns.
type Container struct {
	ID   string
	Name string // without the leading "/"
	Pid  int    // the main process's pid as the daemon sees it; 0 when not running
}

// Client speaks HTTP/1.1 to one daemon.
type Client struct {
	base string // scheme://host for the request URL
	hc   *http.Client
}

// maxBody bounds an answer: an inspection is a few KiB.
const maxBody = 4 << 20

// New returns a client for host: unix:///path/to/socket, or tcp://host:port
// and http://host:port (plain HTTP; the exporter sends no credentials).
func New(host string) (*Client, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("docker host %q: %w", host, err)
	}
	tr := &http.Transport{MaxIdleConns: 2, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 30 * time.Second}
	c := &Client{hc: &http.Client{Transport: tr}}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		if path == "" {
			return nil, fmt.Errorf("docker host %q: no socket path", host)
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}
		c.base = "http://docker"
	case "tcp", "http":
		if u.Host == "" {
			return nil, fmt.Errorf("docker host %q: no host:port", host)
		}
		c.base = "http://" + u.Host
	default:
		return nil, fmt.Errorf("docker host %q: scheme %q is neither unix, tcp nor http", host, u.Scheme)
	}
	return c, nil
}

// Inspect returns the container id or name refers to, ErrNotFound when the
// daemon has none, or an error saying what the daemon answered.
func (c *Client) Inspect(ctx context.Context, id string) (Container, error) {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return Container{}, fmt.Errorf("container %q: not an ID or name", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/containers/"+url.PathEscape(id)+"/json", nil)
	if err != nil {
		return Container{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Container{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return Container{}, fmt.Errorf("container %s: reading the answer: %w", id, err)
	}
	if len(body) > maxBody {
		return Container{}, fmt.Errorf("container %s: answer longer than %d bytes", id, maxBody)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return Container{}, ErrNotFound
	case resp.StatusCode != http.StatusOK:
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return Container{}, fmt.Errorf("container %s: %s: %s", id, resp.Status, e.Message)
		}
		return Container{}, fmt.Errorf("container %s: %s", id, resp.Status)
	}
	var r struct {
		ID    string `json:"Id"`
		Name  string `json:"Name"`
		State *struct {
			Pid int `json:"Pid"`
		} `json:"State"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return Container{}, fmt.Errorf("container %s: the answer is not an inspection: %w", id, err)
	}
	if r.ID == "" {
		return Container{}, fmt.Errorf("container %s: the answer has no Id", id)
	}
	out := Container{ID: r.ID, Name: strings.TrimPrefix(r.Name, "/")}
	if r.State != nil {
		out.Pid = r.State.Pid
	}
	return out, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }
