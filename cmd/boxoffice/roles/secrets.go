package roles

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"slices"
	"strings"

	"boxoffice/platform/admission"
)

// withSecretFiles returns getenv with each secret variable that is unset
// but has <VAR>_FILE set read from that file, a trailing newline trimmed
// (what `openssl rand -hex 32 > file` writes). The secret variables are
// secretVars and the cells' database URLs (BOXOFFICE_CELL_<NAME>_DATABASE_URL).
// Both VAR and VAR_FILE set is a problem added to errs, as is a file that
// cannot be read: a role must not start on the wrong one of two secrets,
// nor on none.
func withSecretFiles(getenv func(string) string, errs *configErrors) func(string) string {
	names := slices.Clone(secretVars)
	for _, cell := range append(strings.Split(getenv("BOXOFFICE_CELLS"), ","), getenv("BOXOFFICE_CELL"), "default") {
		if cell = strings.TrimSpace(cell); cell != "" {
			names = append(names, cellURLVar(cell))
		}
	}
	files := map[string]string{}
	for _, name := range names {
		path := getenv(name + "_FILE")
		if path == "" {
			continue
		}
		if getenv(name) != "" {
			errs.add(name, "and "+name+"_FILE are both set: set only one of them")
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			// The path and the reason only: the error never holds the file's content.
			errs.add(name+"_FILE", "cannot be read ("+err.Error()+")")
			continue
		}
		files[name] = strings.TrimRight(string(raw), "\r\n")
	}
	if len(files) == 0 {
		return getenv
	}
	return func(name string) string {
		if v, ok := files[name]; ok {
			return v
		}
		return getenv(name)
	}
}

// Secret values this repository publishes: the former development
// defaults of compose.yaml and the placeholder of .env.example. Like the
// Dev* values, they are anyone's to read, so no role but dev accepts them.
const (
	composeJWTSecret         = "compose-dev-only-jwt-secret-change-me-000"
	composeAdmissionKey      = "compose-dev-only-admission-key-change-me"
	composeWebhookKey        = "whsec_compose_dev_only_change_me"
	composeTicketSeed        = "Y29tcG9zZS1kZXYtb25seS10aWNrZXQtc2VlZC0zMmI="
	composeWebhookSecretKeys = "compose:7rREk+ArjS2bxsmdEgMbk6LPKna2q0yEg4l4vfdq5wE="
	// envExamplePlaceholder is every secret's value in .env.example; most
	// variables refuse it as malformed, STRIPE_WEBHOOK_SECRET as public.
	envExamplePlaceholder = "change-me"
)

// publicKeyMaterial is every secret published in this repository, as the
// bytes a key is made of: the Dev* values and DevTicketSeed, the keys of
// DevWebhookSecretKeys, the admission signing keys derived from the
// public admission keys, and their compose.yaml and .env.example
// counterparts. A key is public whatever variable it is given in: the
// dev JWT secret is no better as an admission key.
func publicKeyMaterial() [][]byte {
	m := [][]byte{DevTicketSeed(), []byte(envExamplePlaceholder)}
	for _, s := range []string{DevJWTSecret, DevAdmissionKey, DevWebhookKey, composeJWTSecret, composeAdmissionKey, composeWebhookKey} {
		m = append(m, []byte(s), admission.DeriveSigningKey([]byte(s)).Seed())
	}
	for _, list := range []string{DevWebhookSecretKeys, composeWebhookSecretKeys} {
		m = append(m, keyListMaterial(list)...)
	}
	if seed, err := base64.StdEncoding.DecodeString(composeTicketSeed); err == nil {
		m = append(m, seed)
	}
	return m
}

// keyListMaterial is the decoded keys of a <key id>:<base64> list; entries
// that do not decode are left out (ParseKeyring refuses them anyway).
func keyListMaterial(list string) [][]byte {
	var keys [][]byte
	for _, entry := range strings.Split(list, ",") {
		_, b64, _ := strings.Cut(strings.TrimSpace(entry), ":")
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil {
			keys = append(keys, k)
		}
	}
	return keys
}

// refusePublicSecrets adds to errs a problem for each secret of c that
// this repository publishes (publicKeyMaterial), read from getenv: every role but dev runs where buyers pay, and a secret
// anyone can read lets anyone mint bearer or admission tokens, sign
// tickets, forge the provider's webhooks or open organizers' endpoint
// secrets. The error names the variable, never the value.
func (c Config) refusePublicSecrets(getenv func(string) string, errs *configErrors) {
	public := publicKeyMaterial()
	isPublic := func(k []byte) bool {
		return len(k) > 0 && slices.ContainsFunc(public, func(p []byte) bool { return bytes.Equal(p, k) })
	}
	seed := func(k ed25519.PrivateKey) []byte {
		if k == nil {
			return nil
		}
		return k.Seed()
	}
	for _, v := range []struct {
		name string
		keys [][]byte
	}{
		{"BOXOFFICE_JWT_SECRET", [][]byte{c.JWTSecret}},
		{"BOXOFFICE_ADMISSION_KEY", [][]byte{c.AdmissionKey}},
		{"BOXOFFICE_ADMISSION_SIGNING_KEY", [][]byte{seed(c.AdmissionSigningKey)}},
		{"STRIPE_WEBHOOK_SECRET", [][]byte{[]byte(c.StripeWebhookSecret)}},
		{"BOXOFFICE_TICKET_SIGNING_KEY", [][]byte{c.TicketSeed}},
		{webhookKeysVar, keyListMaterial(getenv(webhookKeysVar))},
	} {
		if slices.ContainsFunc(v.keys, isPublic) {
			errs.add(v.name, "is a public development value (published in this repository, for `boxoffice dev` only): generate a secret of your own (.env.example says how)")
		}
	}
}
