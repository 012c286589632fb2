.PHONY: deps test demo soak bench

# deps installs redis-server and redis-cli from Debian packages when either is missing.
deps:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
		sudo=; if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo=sudo; fi; \
		echo "installing redis-server and redis-tools with apt-get"; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools; \
	fi

test: deps
	go vet ./...
	go test -race -count=1 -timeout 20m ./...

demo: deps
	go run ./cmd/redisync demo $(ARGS)

soak: deps
	REDISYNC_SOAK=1 go test -race -count=1 -timeout 60m ./...

bench: deps
	go test -run '^$$' -bench . -benchmem ./...
