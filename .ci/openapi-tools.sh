# Sourced by .ci/lint-openapi and .ci/build-reference: the pinned npm
# tools that read openapi.yaml — Redocly CLI and Spectral — installed once
# into a cache outside the tree, at $tools. Sets have_npm=0 where npm is
# absent (the callers then skip, saying so).
tools="${XDG_CACHE_HOME:-$HOME/.cache}/boxoffice/openapi-lint"
have_npm=1
if ! command -v npm >/dev/null; then
  have_npm=0
  return 0
fi
mkdir -p "$tools"
if [ ! -x "$tools/node_modules/.bin/redocly" ] || [ ! -x "$tools/node_modules/.bin/spectral" ]; then
  (cd "$tools" && npm install --silent --no-audit --no-fund --no-save \
    @redocly/cli@2.77.0 @stoplight/spectral-cli@6.16.3 >/dev/null)
fi
