// Command endhost-agent reports which program owns each of this computer's connections
// through the home router to the router's hwdb (AppTuples). See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"homework/endhost-agent/internal/agent"
	"homework/endhost-agent/internal/discovery"
	"homework/endhost-agent/internal/flow"
	"homework/endhost-agent/internal/pairing"
	"homework/endhost-agent/internal/reporter"
	"homework/endhost-agent/internal/source"
)

// locateEvery is how often the agent looks for the router again (a laptop moves, a lease
// changes): a routing-table read, or one run of route(8) on macOS.
const locateEvery = 30 * time.Second

// serviceName is the service's name for the service managers (systemd, launchd, Windows).
const serviceName = "endhost-agent"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("endhost-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	once := fs.Bool("once", false, "print what would be reported now, as JSON lines, and exit (sends nothing)")
	interval := fs.Duration("interval", 250*time.Millisecond, "time between scans of the connection table")
	gatewayFlag := fs.String("gateway", "", "the router's address (default: the default gateway)")
	hwdbFlag := fs.String("hwdb", "", "the router's hwdb RPC address (default: the router's port 987)")
	hostFlag := fs.String("host", "", "this computer's name in reports (default: the hostname)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	routerKey := fs.String("router-key", "", "the household's router key (64 hex characters, from the router's web UI); without it nothing is reported")
	routerKeyFile := fs.String("router-key-file", "", "a file holding the router key (better for services: the key is not in ps)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	key, err := readRouterKey(*routerKey, *routerKeyFile)
	if err != nil {
		fmt.Fprintln(stderr, "endhost-agent:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(stderr, "endhost-agent: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	var gw netip.Addr
	if *gatewayFlag != "" {
		var err error
		if gw, err = netip.ParseAddr(*gatewayFlag); err != nil {
			fmt.Fprintln(stderr, "endhost-agent: --gateway:", err)
			return 2
		}
	}
	host := *hostFlag
	if host == "" {
		host, _ = os.Hostname()
	}

	locate := func() (discovery.Router, string, error) {
		router, err := discovery.Find(gw)
		if *hwdbFlag != "" {
			return router, *hwdbFlag, err
		}
		return router, router.HWDB(), err
	}
	router, hwdb, err := locate()
	if err != nil {
		log.Error("cannot find the router", "err", err)
		return 1
	}
	src := source.Default()
	a := agent.New(src, router.Scope, log)

	if *once {
		return printOnce(a, host, stdout, log)
	}

	err = runService(serviceName, func(ctx context.Context) error {
		log.Info("reporting connections through the router", "router", router.Gateway, "self", router.Scope.Self,
			"on_link", router.Scope.OnLink, "hwdb", hwdb, "source", src.Name(), "interval", *interval)
		rep := reporter.New(hwdb, netip.AddrPortFrom(router.Scope.Self, 0).String(), host, key, log)
		defer rep.Close()
		return a.Run(ctx, agent.Options{
			Interval:    *interval,
			LocateEvery: locateEvery,
			Locate: func() (flow.Scope, string, error) {
				r, server, err := locate()
				return r.Scope, server, err
			},
		}, rep)
	})
	if err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// readRouterKey is the key from --router-key or --router-key-file; nil if neither is given.
func readRouterKey(text, file string) (*pairing.Key, error) {
	var (
		key pairing.Key
		err error
	)
	switch {
	case text != "" && file != "":
		return nil, errors.New("give --router-key or --router-key-file, not both")
	case text != "":
		key, err = pairing.ParseKey(text)
		err = wrap("--router-key", err)
	case file != "":
		key, err = pairing.ReadKeyFile(file)
		err = wrap("--router-key-file", err)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &key, nil
}

func wrap(flag string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", flag, err)
}

func printOnce(a *agent.Agent, host string, stdout io.Writer, log *slog.Logger) int {
	reports, err := a.Scan(context.Background())
	if err != nil {
		log.Error("cannot read the connection table", "err", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	for _, r := range reports {
		if err := enc.Encode(reporter.RecordOf(r, host)); err != nil {
			return 1
		}
	}
	return 0
}
