package roles

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
)

// A bad environment is reported whole: every bad setting, each on its own
// line naming its variable and what it must be, not only the first one.
func TestConfigReportsEveryBadSetting(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"DATABASE_MAX_CONNS":              "many",
		"BOXOFFICE_HOLD_TTL":              "five minutes",
		"BOXOFFICE_ADMISSION_TTL":         "10s",
		"BOXOFFICE_STREAM_REPLICAS":       "9",
		"BOXOFFICE_PAYMENTS":              "paypal",
		"BOXOFFICE_LOG_LEVEL":             "loud",
		"BOXOFFICE_WEBHOOK_ALLOW_PRIVATE": "maybe",
		"BOXOFFICE_CORS_ORIGINS":          "*",
		"BOXOFFICE_JWT_SECRET":            "short",
		"BOXOFFICE_JWKS_URL":              "http://idp.example.com/jwks",
	}
	_, err := LoadConfig(envOf(bad), "NATS_URL")
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	want := map[string]string{
		"DATABASE_MAX_CONNS":              "must be a positive number",
		"BOXOFFICE_HOLD_TTL":              "must be a positive duration such as 5m",
		"BOXOFFICE_ADMISSION_TTL":         "must be a duration from 1m to 24h such as 15m",
		"BOXOFFICE_STREAM_REPLICAS":       "must be a number from 1 to 5",
		"BOXOFFICE_PAYMENTS":              "must be stripe or sandbox",
		"BOXOFFICE_LOG_LEVEL":             "must be debug, info, warn or error",
		"BOXOFFICE_WEBHOOK_ALLOW_PRIVATE": "must be true or false",
		"BOXOFFICE_CORS_ORIGINS":          "must list origins",
		"BOXOFFICE_JWT_SECRET":            "must be at least 32 bytes",
		"BOXOFFICE_JWKS_URL":              "must be an https URL",
		// The rules that join settings, and the required ones, too.
		"BOXOFFICE_JWT_ISSUER":   "is required with BOXOFFICE_JWKS_URL",
		"BOXOFFICE_JWT_AUDIENCE": "is required with BOXOFFICE_JWKS_URL",
		"NATS_URL":               "is required but not set",
	}
	require.Len(t, lines, len(want), "one line per bad setting: %s", err)
	for name, problem := range want {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, name+": ") {
				require.Contains(t, l, problem)
				found = true
			}
		}
		require.True(t, found, "%s is reported: %s", name, err)
	}
	for _, v := range bad {
		require.NotContains(t, err.Error(), `"`+v+`"`, "no value is repeated")
	}

	// R's ceiling is checked against R once both are read.
	_, err = LoadConfig(envOf(map[string]string{"BOXOFFICE_ADMISSION_RATE": "300", "BOXOFFICE_ADMISSION_RATE_MAX": "100"}))
	require.EqualError(t, err, "BOXOFFICE_ADMISSION_RATE_MAX: "+errAdmissionRateMax)
}

// A default written in the table is the value the loader gives an unset
// variable: loading the defaults spelled out changes nothing, and the
// defaults the handlers apply themselves are the settings'.
func TestSettingsDefaultsAreTheLoadersDefaults(t *testing.T) {
	t.Parallel()
	unset, err := LoadConfig(envOf(nil))
	require.NoError(t, err)
	spelled := map[string]string{}
	for _, s := range settings {
		if s.parse != nil && s.def != "" {
			spelled[s.name] = s.def
		}
	}
	set, err := LoadConfig(envOf(spelled))
	require.NoError(t, err)
	require.Equal(t, unset, set)

	require.Equal(t, handlers.DefaultHoldsPerSecond, unset.HoldRateLimit)
	require.Equal(t, handlers.DefaultEventReadsPerSecond, unset.EventReadIPLimit)
	require.Equal(t, 5*time.Minute, unset.HoldTTL)
	require.Equal(t, 840*time.Hour, unset.InboxRetention)
	require.Equal(t, "0s,5s,5m,30m,2h,5h,10h,10h", retryScheduleText(unset.Webhooks.RetrySchedule))
}

// Every environment variable the binaries' commands read has its one
// definition in settings (read by name in the source, as getenv("NAME")).
func TestEveryVariableIsASetting(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, s := range settings {
		require.False(t, known[s.name], "%s is defined once", s.name)
		known[s.name] = true
		require.NotEmpty(t, s.meaning, "%s says what it means", s.name)
	}
	read := regexp.MustCompile(`(?:getenv|Getenv)\("([A-Z][A-Z0-9_]+)"\)`)
	for _, dir := range []string{".", "..", "../../boxoffice-lab"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range read.FindAllStringSubmatch(string(src), -1) {
				require.True(t, known[m[1]], "%s reads %s, which has no setting", f, m[1])
			}
		}
	}
}

// README.md's configuration table is the one make generate writes from
// settings (make check-generated fails on the same drift).
func TestReadmeSettingsTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	want, err := withSettingsTable(string(readme))
	require.NoError(t, err)
	require.Equal(t, want, string(readme), "README.md's table differs from settings.go: run make generate")

	_, err = withSettingsTable("# no table here\n")
	require.ErrorContains(t, err, "no settings table")
}
