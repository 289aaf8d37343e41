#!/usr/bin/env bash
# The alert rules and scrape configurations of deploy/prometheus, checked
# with Prometheus's promtool: the rules parse, both configurations parse
# (with the rules they load), and the rules' unit tests pass (series that
# fire each alert and series that must not). Every appliance_* metric a rule
# reads must be one a daemon exports. Skipped without promtool (Debian's
# package prometheus; scripts/bootstrap --test installs it).
set -euo pipefail
src="${SOURCE_ROOT:?}"
dir="$src/deploy/prometheus"
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not found (apt-get install prometheus)"
  exit 77
fi
fail() { echo "FAIL: $*" >&2; exit 1; }

promtool check rules "$dir/appliance.rules.yml" || fail "promtool check rules"
for conf in prometheus.yml prometheus-compose.yml; do
  promtool check config "$dir/$conf" || fail "promtool check config $conf"
done
(cd "$dir" && promtool test rules appliance.rules.test.yml) || fail "promtool test rules"

# Each metric the rules read appears where a daemon renders its /metrics.
names=$(grep -o 'appliance_[a-z0-9_]*' "$dir/appliance.rules.yml" | sort -u)
[ -n "$names" ] || fail "no appliance_* metric in the rules"
for n in $names; do
  grep -rqs --include='*.c' "\"[^\"]*$n[ {\\\"]" "$src/coordinator" "$src/memoryx" "$src/swarmx" \
    "$src/worker" "$src/wse-node" "$src/common/daemon" ||
    fail "the rules read $n, which no daemon exports"
done
echo "ok: rules, 2 scrape configurations and the rules' tests; metrics read: $(echo $names)"
