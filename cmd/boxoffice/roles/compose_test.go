package roles

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// No container engine runs where CI does, so compose.yaml is checked
// against the code instead: each service's image or build, each
// dependency, each command, each variable and each mounted file, and the
// Prometheus targets and Grafana queries against what the roles export.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   any               `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Restart string   `yaml:"restart"`
	Volumes []string `yaml:"volumes"`
	Ports   []string `yaml:"ports"`
}

// dependencies returns the services s depends on, with their conditions
// ("" for the short list form).
func (s composeService) dependencies(t *testing.T) map[string]string {
	t.Helper()
	deps := map[string]string{}
	switch d := s.DependsOn.(type) {
	case nil:
	case []any:
		for _, n := range d {
			deps[n.(string)] = ""
		}
	case map[string]any:
		for n, v := range d {
			cond, _ := v.(map[string]any)["condition"].(string)
			deps[n] = cond
		}
	default:
		t.Fatalf("depends_on of unexpected shape %T", d)
	}
	return deps
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../../../compose.yaml")
	require.NoError(t, err)
	var f composeFile
	require.NoError(t, yaml.Unmarshal(raw, &f))
	require.NotEmpty(t, f.Services)
	return f
}

// interpolation is a variable of compose.yaml: ${NAME}, ${NAME:-default}
// or ${NAME:?error} (and their forms without the colon).
var interpolation = regexp.MustCompile(`\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}`)

// interpolate resolves v's variables from env as compose does: a default
// when the variable is unset (or empty, with ":-"), and a test failure
// where compose would refuse to start (":?").
func interpolate(t *testing.T, v string, env map[string]string) string {
	t.Helper()
	return interpolation.ReplaceAllStringFunc(v, func(m string) string {
		p := interpolation.FindStringSubmatch(m)
		val, set := env[p[1]]
		switch p[2] {
		case ":-":
			if val == "" {
				return p[3]
			}
		case "-":
			if !set {
				return p[3]
			}
		case ":?", "?":
			require.True(t, set && (val != "" || p[2] == "?"), "compose would refuse to start: %s is required", p[1])
		}
		return val
	})
}

// composeEnv is an environment compose.yaml starts with: every secret a
// random one of this test's, and the sandbox by name.
func composeEnv(t *testing.T) map[string]string {
	t.Helper()
	return withVars(testSecrets(t), map[string]string{
		"POSTGRES_PASSWORD":  randomHex(t, 24),
		"NATS_PASSWORD":      randomHex(t, 24),
		"BOXOFFICE_PAYMENTS": "sandbox",
	})
}

// envExample is .env.example as compose reads an env file.
func envExample(t *testing.T) map[string]string {
	t.Helper()
	vars, err := dotenv.Read("../../../.env.example")
	require.NoError(t, err)
	return vars
}

// sourceFiles returns the non-test Go files of the module.
func sourceFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir("../../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files[path] = string(raw)
		}
		return nil
	}))
	return files
}

func TestComposeMatchesTheCode(t *testing.T) {
	f := loadCompose(t)
	src := sourceFiles(t)
	var cmdSrc strings.Builder
	for path, s := range src {
		// The binary's own, and the standard OpenTelemetry variables
		// that platform/telemetry reads.
		if strings.HasPrefix(path, "../../../cmd/boxoffice/") || strings.HasPrefix(path, "../../../platform/telemetry/") {
			cmdSrc.WriteString(s)
		}
	}
	// The variables the binary reads, and its subcommands.
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:getenv|Getenv|env)\("([A-Z][A-Z0-9_]+)"\)`).FindAllStringSubmatch(cmdSrc.String(), -1) {
		known[m[1]] = true
	}
	require.True(t, known["DATABASE_URL"] && known["NATS_URL"], "the variable scan found the configuration")
	// Read by the Go runtime itself.
	known["GOMEMLIMIT"], known["GOGC"] = true, true
	var commands []string
	for _, c := range Commands {
		if c.Run != nil {
			commands = append(commands, c.Name)
		}
	}

	for _, need := range []string{"postgres", "nats-1", "nats-2", "nats-3", "redis", "stripe-mock", "migrate",
		"api-1", "api-2", "relay-1", "relay-2", "worker-1", "worker-2", "prometheus", "grafana"} {
		require.Contains(t, f.Services, need)
	}
	roles := map[string]int{}
	started, example := composeEnv(t), envExample(t)
	for name, s := range f.Services {
		t.Run(name, func(t *testing.T) {
			require.True(t, s.Image != "" || s.Build != nil, "an image or a build")
			if s.Image != "" {
				require.Regexp(t, `^[a-z0-9./-]+:[A-Za-z0-9._-]+$`, s.Image, "images are pinned to a tag")
				require.NotContains(t, s.Image, ":latest")
			}
			if s.Build != nil {
				require.Equal(t, ".", s.Build)
				require.FileExists(t, "../../../Dockerfile")
			}
			require.NotEmpty(t, s.Restart, "a restart policy")
			for dep, cond := range s.dependencies(t) {
				require.Contains(t, f.Services, dep, "depends on a service that exists")
				require.Contains(t, []string{"", "service_started", "service_healthy", "service_completed_successfully"}, cond)
				if cond == "service_healthy" {
					require.NotNil(t, f.Services[dep].Healthcheck, "%s is waited on as healthy, so it needs a healthcheck", dep)
				}
			}
			for _, v := range s.Volumes {
				src, _, _ := strings.Cut(v, ":")
				if strings.HasPrefix(src, "./") {
					_, err := os.Stat(filepath.Join("../../..", src))
					require.NoError(t, err, "mounted path exists")
				} else {
					require.Contains(t, f.Volumes, src, "named volume is declared")
				}
			}
			if s.Image != "boxoffice:dev" {
				return
			}
			// One of ours: a real subcommand, known variables, a config the
			// role accepts, and (unless it runs once) a healthcheck on the
			// role's own port.
			require.NotEmpty(t, s.Command)
			role := s.Command[0]
			require.Contains(t, commands, role, "a boxoffice subcommand")
			roles[role]++
			env, placeholders := map[string]string{}, map[string]string{}
			for k, v := range s.Environment {
				require.True(t, known[k], "%s: the code never reads %s", name, k)
				env[k] = interpolate(t, v, started)
				placeholders[k] = interpolate(t, v, example)
			}
			getenv := func(k string) string { return env[k] }
			var required []string
			switch role {
			case "serve":
				required = []string{"DATABASE_URL", "BOXOFFICE_JWT_SECRET", "BOXOFFICE_ADMISSION_KEY"}
			case "relay", "work":
				required = []string{"DATABASE_URL", "NATS_URL"}
			case "migrate":
				required = []string{"DATABASE_URL"}
			}
			cfg, err := LoadConfig(getenv, required...)
			require.NoError(t, err, "the role accepts its configuration")
			if role == "migrate" {
				require.Equal(t, "no", s.Restart)
				require.Equal(t, "postgres", strings.Split(strings.Split(cfg.DatabaseURL, "@")[1], ":")[0])
				return
			}
			require.Equal(t, "service_completed_successfully", s.dependencies(t)["migrate"], "starts after the migration")
			require.NoError(t, cfg.paymentsNeeds())
			require.Equal(t, "sandbox", cfg.Payments, "the sandbox, named")
			// .env.example as it is: the role refuses its placeholders.
			_, err = LoadConfig(func(k string) string { return placeholders[k] }, required...)
			require.Error(t, err, "%s accepts .env.example's placeholders", name)
			require.Equal(t, 3, cfg.Streams.Replicas, "R3 streams on the 3-node cluster")
			require.Len(t, strings.Split(cfg.NATSURL, ","), 3, "every NATS node is listed")
			require.NotNil(t, s.Healthcheck)
			port := "9090"
			if role == "serve" {
				port = "8080"
			}
			require.Equal(t, []string{"CMD", "/boxoffice", "healthcheck", "http://127.0.0.1:" + port + "/readyz"}, s.Healthcheck.Test)
		})
	}
	require.Equal(t, map[string]int{"migrate": 1, "serve": 2, "relay": 2, "work": 2}, roles, "relays run in pairs")
}

func TestPrometheusScrapesEveryRole(t *testing.T) {
	f := loadCompose(t)
	raw, err := os.ReadFile("../../../deploy/prometheus/prometheus.yml")
	require.NoError(t, err)
	var cfg struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	var want []string
	for name, s := range f.Services {
		if s.Image != "boxoffice:dev" || s.Command[0] == "migrate" {
			continue
		}
		// Every role's metrics are on its ops listener; the API's public
		// port does not serve them.
		want = append(want, name+":9090")
	}
	slices.Sort(want)
	slices.Sort(targets)
	require.Equal(t, want, targets)
}

// The dashboard works on any Prometheus datasource (a variable every
// panel follows, not a provisioned uid), opens on the API's requests, errors and
// latency by operation, and groups R only by labels R has.
func TestDashboardFollowsTheDatasourceVariable(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/grafana/dashboards/boxoffice.json")
	require.NoError(t, err)
	var dash struct {
		Templating struct {
			List []struct{ Name, Type, Query string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title      string               `json:"title"`
			Datasource struct{ UID string } `json:"datasource"`
			GridPos    struct{ Y int }      `json:"gridPos"`
			Targets    []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Contains(t, dash.Templating.List, struct{ Name, Type, Query string }{"datasource", "datasource", "prometheus"})
	var top []string
	for _, p := range dash.Panels {
		require.Equal(t, "${datasource}", p.Datasource.UID, "panel %q", p.Title)
		for _, target := range p.Targets {
			if strings.Contains(target.Expr, "boxoffice_admission_rate") {
				require.NotRegexp(t, `by \([^)]*event_id`, target.Expr, "R has no event_id label: it is the cell's")
			}
			if p.GridPos.Y == 0 {
				top = append(top, target.Expr)
			}
		}
	}
	require.Len(t, top, 3, "the first row: rate, errors, latency")
	require.Contains(t, top[0], "sum by (operation) (rate(boxoffice_http_request_duration_seconds_count")
	require.Contains(t, top[1], `code=~"5.."`)
	require.Contains(t, top[2], "histogram_quantile(0.99, sum by (operation, le)")
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/grafana/dashboards/boxoffice.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	var all strings.Builder
	for _, s := range sourceFiles(t) {
		all.WriteString(s)
	}
	code := all.String()
	suffix := regexp.MustCompile(`_(bucket|count|sum)$`)
	seen := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			for _, m := range regexp.MustCompile(`boxoffice_[a-z0-9_]+`).FindAllString(target.Expr, -1) {
				name := suffix.ReplaceAllString(m, "")
				if !strings.Contains(code, `"`+name+`"`) && strings.Contains(code, `"`+m+`"`) {
					name = m // a counter whose own name ends in _count
				}
				require.Contains(t, code, `"`+name+`"`, "panel %q queries %s, which no role exports", p.Title, m)
				seen++
			}
		}
	}
	require.Greater(t, seen, 10)
}

// Every alert of deploy/prometheus/alerts.yml has a runbook section in
// docs/alerts.md at its absolute runbook_url, a unit test in
// alerts_test.yml, and reads only metrics the code exports (a misspelt
// series would never fire).
func TestAlertsHaveRunbooks(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Expr        string
				Annotations map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	runbooks, err := os.ReadFile("../../../docs/alerts.md")
	require.NoError(t, err)
	tests, err := os.ReadFile("../../../deploy/prometheus/alerts_test.yml")
	require.NoError(t, err)
	var src strings.Builder
	for _, s := range sourceFiles(t) {
		src.WriteString(s)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			require.Equal(t, "https://github.com/boxoffice/boxoffice/blob/main/docs/alerts.md#"+strings.ToLower(r.Alert), r.Annotations["runbook_url"], r.Alert)
			require.Contains(t, string(runbooks), "\n## "+r.Alert+"\n", "%s has no runbook section", r.Alert)
			require.Contains(t, string(tests), "alertname: "+r.Alert+"\n", "%s has no promtool test", r.Alert)
			for _, m := range regexp.MustCompile(`boxoffice_[a-z_]+`).FindAllString(r.Expr, -1) {
				name := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(m, "")
				require.Contains(t, src.String(), `"`+name+`"`, "%s reads %s, which no code exports", r.Alert, m)
			}
		}
	}
	require.GreaterOrEqual(t, n, 14, "one alert per §16 signal")
}

// compose.yaml as Docker Compose itself reads it with .env.example as its
// env file: the compose specification's own loader (schema,
// interpolation, extension anchors, the depends_on graph) accepts it, and
// every service the checks above name is one it sees.
func TestComposeFollowsTheSpecification(t *testing.T) {
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "compose.yaml")},
		cli.WithWorkingDirectory(root), cli.WithName("boxoffice"), cli.WithEnv([]string{}),
		cli.WithEnvFiles(filepath.Join(root, ".env.example")), cli.WithDotEnv, cli.WithProfiles([]string{"monitoring", "tracing"}))
	require.NoError(t, err)
	project, err := opts.LoadProject(t.Context())
	require.NoError(t, err, "the compose specification's loader refuses compose.yaml")
	f := loadCompose(t)
	require.ElementsMatch(t, slices.Collect(maps.Keys(f.Services)), project.ServiceNames(), "the loader and the checks see the same services")
	for _, name := range []string{"relay-1", "relay-2"} {
		svc, err := project.GetService(name)
		require.NoError(t, err)
		require.Equal(t, types.ShellCommand{"relay"}, svc.Command, "%s runs the relay", name)
	}
	redis, err := project.GetService("redis")
	require.NoError(t, err)
	require.Contains(t, strings.Join(redis.Command, " "), "--appendonly yes", "admissions survive a Redis restart")
}

// PostgreSQL's max_connections holds every pool compose starts at its
// DATABASE_MAX_CONNS, with room for the migration, an operator's commands
// and the connections kept for superusers: at 96 of 97 usable, one
// operator's audit during an onsale would be refused.
func TestComposeSizesPostgres(t *testing.T) {
	t.Parallel()
	f := loadCompose(t)
	var maxConns int
	for i, arg := range f.Services["postgres"].Command {
		if n, ok := strings.CutPrefix(arg, "max_connections="); ok && i > 0 && f.Services["postgres"].Command[i-1] == "-c" {
			var err error
			maxConns, err = strconv.Atoi(n)
			require.NoError(t, err)
		}
	}
	require.Positive(t, maxConns, "postgres sets max_connections")
	pools := 0
	for name, s := range f.Services {
		if _, ok := s.Environment["DATABASE_URL"]; !ok || name == "migrate" {
			continue
		}
		n, err := strconv.Atoi(s.Environment["DATABASE_MAX_CONNS"])
		require.NoError(t, err, "%s sets DATABASE_MAX_CONNS", name)
		pools += n
	}
	const superuserReserved, migrate, operator = 3, 4, 16
	require.GreaterOrEqual(t, maxConns, pools+superuserReserved+migrate+operator,
		"pools %d + superusers %d + migrate %d + an operator's pool %d", pools, superuserReserved, migrate, operator)
}

// loadComposeProject loads compose.yaml with the compose specification's
// loader in environment env (nothing else: no .env, no process
// environment).
func loadComposeProject(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "compose.yaml")},
		cli.WithWorkingDirectory(root), cli.WithName("boxoffice"), cli.WithEnv(list))
	require.NoError(t, err)
	return opts.LoadProject(t.Context())
}

// composeSecrets are the variables of compose.yaml that hold a secret:
// the roles' secret variables and the servers' passwords.
func composeSecrets() []string {
	return append(slices.Clone(secretVars), "POSTGRES_PASSWORD", "NATS_PASSWORD")
}

// compose.yaml ships no secret: each one, and the payment provider, must
// be given (.env.example lists them), with no literal default in the file
// to fall back on; the sandbox runs only when named.
func TestComposeRequiresItsSecrets(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../compose.yaml")
	require.NoError(t, err)
	var body strings.Builder
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			body.WriteString(line)
		}
	}
	referenced := map[string]bool{}
	for _, m := range interpolation.FindAllStringSubmatch(body.String(), -1) {
		name, op, def := m[1], m[2], m[3]
		referenced[name] = true
		if slices.Contains(composeSecrets(), name) || name == "BOXOFFICE_PAYMENTS" {
			require.False(t, strings.Contains(op, "-") && def != "", "%s has the literal default %q", name, def)
		}
		if name == "BOXOFFICE_PAYMENTS" {
			require.Equal(t, ":?", op, "BOXOFFICE_PAYMENTS is required: the sandbox runs only when named")
		}
	}
	example := envExample(t)
	var required []string
	for _, name := range composeSecrets() {
		if !referenced[name] || name == "STRIPE_SECRET_KEY" { // STRIPE_SECRET_KEY: with stripe only
			continue
		}
		required = append(required, name)
		require.Regexp(t, `(?s)\$\{`+name+`:\?`, body.String(), "%s is required", name)
	}
	required = append(required, "BOXOFFICE_PAYMENTS")
	require.Subset(t, required, []string{"POSTGRES_PASSWORD", "NATS_PASSWORD", "BOXOFFICE_JWT_SECRET", "BOXOFFICE_ADMISSION_KEY",
		"STRIPE_WEBHOOK_SECRET", "BOXOFFICE_TICKET_SIGNING_KEY", webhookKeysVar})

	// Without them, the loader refuses the file, naming each one missing.
	_, err = loadComposeProject(t, nil)
	require.Error(t, err, "compose.yaml loads with no secret given")
	for _, name := range required {
		require.Contains(t, example, name, ".env.example lists %s", name)
		_, err := loadComposeProject(t, withVars(example, map[string]string{name: ""}))
		require.ErrorContains(t, err, name, "compose.yaml loads without %s", name)
	}
	// With .env.example's values it loads; each secret there is the
	// placeholder the roles refuse, with how to make a real one above it.
	_, err = loadComposeProject(t, example)
	require.NoError(t, err)
	exampleRaw, err := os.ReadFile("../../../.env.example")
	require.NoError(t, err)
	for _, name := range required {
		if name == "BOXOFFICE_PAYMENTS" {
			require.NotEqual(t, "sandbox", example[name], ".env.example does not choose the sandbox")
			continue
		}
		require.Equal(t, envExamplePlaceholder, example[name], "%s in .env.example", name)
		require.Regexp(t, `#   [^\n]*openssl[^\n]*\n`+name+`=`, string(exampleRaw), "%s: .env.example says how to make one", name)
	}
}
