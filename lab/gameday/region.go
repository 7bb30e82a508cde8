package gameday

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"

	"boxoffice/testkit/procs"
)

// secrets are the regions' shared secrets, random for each game day: the
// standby must verify the primary's tokens and tickets.
type secrets struct {
	jwt, admission, stripeWebhook, ticketSeed, webhookKeys string
}

func newSecrets() secrets {
	seed := make([]byte, 32)
	_, _ = rand.Read(seed)
	return secrets{
		jwt: randomHex(32), admission: randomHex(32), stripeWebhook: "whsec_" + randomHex(24),
		ticketSeed:  base64.StdEncoding.EncodeToString(seed),
		webhookKeys: "gd:" + base64.StdEncoding.EncodeToString([]byte(randomHex(32))),
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// roleEnv is the environment of one region's roles.
func (s secrets) roleEnv(env []string, dbURL, natsURL, apiPort string, epoch int, holdTTL time.Duration) []string {
	return append(env,
		"DATABASE_URL="+dbURL,
		"DATABASE_MAX_CONNS=6",
		"NATS_URL="+natsURL,
		"BOXOFFICE_JWT_SECRET="+s.jwt,
		"BOXOFFICE_ADMISSION_KEY="+s.admission,
		"BOXOFFICE_PAYMENTS=sandbox",
		"STRIPE_WEBHOOK_SECRET="+s.stripeWebhook,
		"BOXOFFICE_SANDBOX_WEBHOOK_URL=http://127.0.0.1:"+apiPort+"/v1/webhooks/stripe",
		"BOXOFFICE_TICKET_SIGNING_KEY="+s.ticketSeed,
		"BOXOFFICE_WEBHOOK_SECRET_KEYS="+s.webhookKeys,
		"BOXOFFICE_WEBHOOK_ALLOW_PRIVATE=true",
		"BOXOFFICE_HOLD_TTL="+holdTTL.String(),
		"BOXOFFICE_WAITINGROOM_IP_LIMIT=-1",
		"BOXOFFICE_EVENT_READ_IP_LIMIT=-1",
		"BOXOFFICE_HOLD_RATE_LIMIT=-1",
		"BOXOFFICE_ADMISSION_RATE=100",
		fmt.Sprintf("BOXOFFICE_REGION_EPOCH=%d", epoch),
		"BOXOFFICE_LOG_LEVEL=warn",
	)
}

// region is one region's processes: its NATS node and its roles. Its
// PostgreSQL cluster is started by the game day (pgcluster).
type region struct {
	name    string
	dir     string
	bin     string
	procs   []*procs.Proc
	api     string // the API's base URL
	natsURL string
}

func (r *region) add(name string, env []string, args ...string) (*procs.Proc, error) {
	p, err := procs.New(procs.Spec{Name: r.name + "-" + name, Bin: r.bin, Args: args, Env: env,
		LogPath: filepath.Join(r.dir, r.name+"-"+name+".log"), OwnGroup: true})
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	return p, nil
}

// startNATS starts the region's NATS node in JetStream domain r.name;
// leafPort > 0 accepts leafnode connections, leafRemote connects to one.
func (r *region) startNATS(ctx context.Context, env []string, leafPort int, leafRemote string) error {
	port, err := procs.FreePort()
	if err != nil {
		return err
	}
	mon, err := procs.FreePort()
	if err != nil {
		return err
	}
	args := []string{"nats-node", "-name", "nats-" + r.name, "-port", fmt.Sprint(port), "-cluster-port", "0",
		"-http-port", fmt.Sprint(mon), "-store", filepath.Join(r.dir, "nats-"+r.name), "-domain", r.name}
	if leafPort > 0 {
		args = append(args, "-leaf-port", fmt.Sprint(leafPort))
	}
	if leafRemote != "" {
		args = append(args, "-leaf-remote", leafRemote)
	}
	p, err := r.add("nats", env, args...)
	if err != nil {
		return err
	}
	r.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	return procs.WaitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", mon), time.Minute)
}

// startRoles starts serve, relay and work with env (roleEnv) and waits
// until each is ready.
func (r *region) startRoles(ctx context.Context, env []string, apiPort string) error {
	r.api = "http://127.0.0.1:" + apiPort
	ready := map[*procs.Proc]string{}
	for _, role := range []string{"serve", "relay", "work"} {
		ops, err := procs.FreePort()
		if err != nil {
			return err
		}
		e := append(env[:len(env):len(env)], fmt.Sprintf("OPS_ADDR=127.0.0.1:%d", ops))
		if role == "serve" {
			e = append(e, "HTTP_ADDR=127.0.0.1:"+apiPort)
		}
		p, err := r.add(role, e, role)
		if err != nil {
			return err
		}
		ready[p] = fmt.Sprintf("http://127.0.0.1:%d/readyz", ops)
	}
	for p, u := range ready {
		if err := procs.WaitHTTP(ctx, p, u, 90*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// killAll SIGKILLs every process of the region at once (as a lost region
// stops), the NATS node among them.
func (r *region) killAll() {
	for _, p := range r.procs {
		_ = p.Kill()
	}
}

// close stops what is still running and closes the logs.
func (r *region) close() {
	for _, p := range r.procs {
		p.Stop()
		_ = p.Close()
	}
}
