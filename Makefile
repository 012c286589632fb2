.PHONY: deps test demo soak bench

# deps installs redis-server and redis-cli, and node and npm, from Debian packages
# when missing, the pinned packages of the Redisson interop driver, and the
# pinned Quint model checker that runs the protocol specification (spec/).
deps:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
		sudo=; if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo=sudo; fi; \
		echo "installing redis-server and redis-tools with apt-get"; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools; \
	fi
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		sudo=; if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo=sudo; fi; \
		echo "installing nodejs and npm with apt-get (the Redisson interop tests run node-redisson)"; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm; \
	fi
	@if [ ! -f redisson/testdata/redisson-node/node_modules/node-redisson/package.json ]; then \
		echo "installing the Redisson interop driver's packages with npm ci"; \
		cd redisson/testdata/redisson-node && npm ci --no-audit --no-fund; \
	fi
	@if [ ! -f spec/node_modules/@informalsystems/quint/package.json ]; then \
		echo "installing the Quint model checker of the protocol specification (spec/) with npm ci"; \
		cd spec && npm ci --no-audit --no-fund; \
	fi

# Modules of their own (kept out of the library's dependencies) are tested too,
# through go.work against the root module of the working tree. The root module
# is tested on its own (GOWORK=off), internal/modproxy builds each of them as
# `go get` would fetch it, and the command is built for Windows, where nothing
# runs its tests.
MODULES := otel goredis

test: deps
	GOWORK=off go vet ./...
	GOWORK=off go test -race -count=1 -timeout 20m ./...
	GOWORK=off GOOS=windows GOARCH=amd64 go build -o /dev/null ./cmd/redisync
	for m in $(MODULES); do (cd $$m && go vet ./... && go test -race -count=1 -timeout 10m ./...) || exit 1; done

demo: deps
	go run ./cmd/redisync demo $(ARGS)

soak: deps
	REDISYNC_SOAK=1 GOWORK=off go test -race -count=1 -timeout 180m ./...

bench: deps
	GOWORK=off go test -run '^$$' -bench . -benchmem ./...

.PHONY: peers

# peers compares redisync with the Go lock libraries (bench/peers, a module of its own).
peers: deps
	cd bench/peers && go run . $(ARGS)

.PHONY: soak-schedule

# soak-schedule runs only the randomized schedule and fencing checks at soak
# size; SEED=N replays one run, FOR=20m ends the schedules' soak sooner.
soak-schedule: deps
	REDISYNC_SOAK=1 GOWORK=off go test -race -count=1 -timeout 90m -v -run '^(TestSchedule|TestFencedLinearizable)$$' . $(if $(SEED),-seed $(SEED)) $(if $(FOR),-soak-for $(FOR))

.PHONY: mutants

# mutants applies each semantic mutant of mutants/ (a patch that plants one
# plausible bug) to a copy of the committed tree and prints which test kills
# it: the randomized tests with three seeds, then the mutant's targeted tests.
# MUTANT=name runs one, SEEDS="1 2 3" sets the seeds. Not part of `make test`.
mutants: deps
	MUTANT="$(MUTANT)" SEEDS="$(SEEDS)" bash mutants/run.sh
