# shortfirst farm: HAProxy configured for size-aware dispatch. Its tests run
# `haproxy -c` on the generated configurations (skipped, saying so, without it).
APT_PACKAGES += haproxy
