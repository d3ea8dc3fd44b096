# deploy: what runs shortfirst on a Linux box (deploy/).
#
# lab/tests/test_deploy_metrics.py (in the lab's pytest run and so in `make test`) checks
# the Grafana dashboard and the Prometheus rules with promtool and every metric name they
# use against /metrics of a running serve and gatekeeper.

# prometheus: promtool.
APT_PACKAGES += prometheus
