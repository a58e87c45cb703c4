package collector

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fabric-exporter/fabric_exporter/internal/dockerapi"
)

// dockerNames looks up container names in the Docker Engine API
// (--collector.process.docker-host) for fabric_process_container_info's
// container_name. Lookups run in a goroutine; a scrape only reads the cache
// and queues IDs it has not seen, so a dead or slow daemon never delays it:
// it costs one log line and leaves container_name empty.
type dockerNames struct {
	env     Env
	host    string
	cli     *dockerapi.Client
	timeout time.Duration
	retry   time.Duration // a failed lookup is retried after this

	mu    sync.Mutex
	cache map[string]dockerName
	queue chan string

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

type dockerName struct {
	name    string
	ok      bool // looked up successfully (name may still be "": no such container)
	pending bool
	at      time.Time
}

const (
	dockerTimeout  = 2 * time.Second
	dockerRetry    = time.Minute
	dockerMaxCache = 4096
)

func newDockerNames(env Env, host string) (*dockerNames, error) {
	cli, err := dockerapi.New(host)
	if err != nil {
		return nil, err
	}
	d := &dockerNames{env: env, host: host, cli: cli, timeout: dockerTimeout, retry: dockerRetry,
		cache: map[string]dockerName{}, queue: make(chan string, 256), done: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	go d.loop()
	return d, nil
}

// Name returns the cached name of a container ("" while unknown) and
// queues a lookup for an ID not looked up yet (or whose lookup failed more
// than retry ago). It never blocks.
func (d *dockerNames) Name(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, found := d.cache[id]
	if found && (e.ok || e.pending || time.Since(e.at) < d.retry) {
		return e.name
	}
	if len(d.cache) >= dockerMaxCache {
		clear(d.cache)
	}
	select {
	case d.queue <- id:
		e.pending = true
		d.cache[id] = e
	default: // the queue is full: try again on a later scrape
	}
	return e.name
}

func (d *dockerNames) loop() {
	defer close(d.done)
	for {
		select {
		case <-d.ctx.Done():
			return
		case id := <-d.queue:
			name, err := d.lookup(id)
			d.mu.Lock()
			d.cache[id] = dockerName{name: name, ok: err == nil, at: time.Now()}
			d.mu.Unlock()
			if err != nil {
				d.env.Once.Warn("docker-names", "msg", "cannot look up container names in the Docker Engine API; container_name stays empty", "docker_host", d.host, "err", err)
			} else {
				d.env.Once.Clear("docker-names")
			}
		}
	}
}

// lookup inspects one container; a container the daemon does not know
// (another runtime's, or removed) is not an error and has no name.
func (d *dockerNames) lookup(id string) (string, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout)
	defer cancel()
	r, err := d.cli.Inspect(ctx, id)
	if err != nil {
		if errors.Is(err, dockerapi.ErrNotFound) {
			return "", nil
		}
		return "", err
	}
	return r.Name, nil
}

// Close stops the lookups.
func (d *dockerNames) Close() {
	d.cancel()
	<-d.done
	d.cli.Close()
}
