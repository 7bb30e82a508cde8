package roles

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// alertmanagerBin is where Debian's prometheus-alertmanager package
// installs Alertmanager.
const alertmanagerBin = "/usr/bin/prometheus-alertmanager"

// deploy/alertmanager/alertmanager.yml, run by Alertmanager itself with
// its receiver's url pointed at this test: an alert posted as Prometheus
// posts it reaches the webhook, firing, with its alertname, instance and
// runbook_url — the page an operator gets names the process and the
// runbook.
func TestAlertmanagerDeliversToTheWebhook(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(alertmanagerBin); err != nil {
		t.Skipf("%s not found; install it with: apt install prometheus-alertmanager", alertmanagerBin)
	}
	got := make(chan []byte, 4)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- body:
		default:
		}
	}))
	t.Cleanup(receiver.Close)

	raw, err := os.ReadFile("../../../deploy/alertmanager/alertmanager.yml")
	require.NoError(t, err)
	const placeholder = "http://alert-receiver.invalid:9095/alerts"
	require.Contains(t, string(raw), placeholder)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Replace(string(raw), placeholder, receiver.URL+"/alerts", 1)), 0o600))

	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, alertmanagerBin, "--config.file="+cfg, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		res, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "alertmanager ready: %s", &logs)

	alert := fmt.Sprintf(`[{"labels":{"alertname":"TargetDown","severity":"page","job":"api","instance":"api-1:9090"},
		"annotations":{"summary":"api api-1:9090 has not answered","runbook_url":"https://github.com/boxoffice/boxoffice/blob/main/docs/alerts.md#targetdown"},
		"startsAt":%q,"generatorURL":"http://prometheus:9090/graph"}]`, time.Now().UTC().Format(time.RFC3339))
	res, err := http.Post(base+"/api/v2/alerts", "application/json", strings.NewReader(alert))
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	var msg struct {
		Receiver string `json:"receiver"`
		Status   string `json:"status"`
		Alerts   []struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"alerts"`
		GroupLabels map[string]string `json:"groupLabels"`
	}
	select {
	case body := <-got:
		require.NoError(t, json.Unmarshal(body, &msg), "%s", body)
	case <-ctx.Done():
		t.Fatalf("the webhook received nothing; alertmanager: %s", &logs)
	}
	require.Equal(t, "operator", msg.Receiver)
	require.Equal(t, "firing", msg.Status)
	require.Equal(t, map[string]string{"alertname": "TargetDown", "instance": "api-1:9090"}, msg.GroupLabels, "grouped by alert and instance")
	require.Len(t, msg.Alerts, 1)
	require.Equal(t, "api-1:9090", msg.Alerts[0].Labels["instance"])
	require.Contains(t, msg.Alerts[0].Annotations["runbook_url"], "docs/alerts.md#targetdown")
}

// freeAddr is a loopback address with a port free at the time of asking.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
