# deb: the Debian package of the release binary (deploy/build-deb.sh, with dpkg-deb).
#
# make deb   target/deb/shortfirst_<version>_<arch>.deb: /usr/bin/shortfirst, the systemd
#            units (deploy/systemd), the example configurations as conffiles under
#            /etc/shortfirst (deploy/etc), the Grafana dashboard and the Prometheus rules
#            (deploy/grafana, deploy/prometheus) and docs/deploy.md. Packs the binary that
#            `make build` made; rebuilds nothing.
#
# The tests (lab/tests/test_deb.py, test_deploy_metrics.py, in the lab's pytest run and so
# in `make test`) build the package the same way, verify the units offline with
# systemd-analyze (no running systemd needed), install it with dpkg, run each installed
# unit's commands as its user with its capabilities in a network namespace, remove it
# (root), check the rules with promtool, and check every metric name the dashboard and the
# rules use against /metrics of a running serve and gatekeeper.

# systemd: systemd-analyze; prometheus: promtool; binutils: objdump, readelf, strip;
# curl: requests inside the test's namespace.
APT_PACKAGES += systemd prometheus binutils adduser curl

DEB_DIR := target/deb

.PHONY: deb
deb: apt build ## Debian package of the release binary with systemd units, configs, dashboard, alerts (target/deb/)
	deploy/build-deb.sh $(BIN) $(DEB_DIR)
