// Command nsqgo drives the real go-nsq (v1.1.0, pinned by go.sum) Producer and Consumer for tidemq's
// interop tests. Same contract as tests/interop/pynsq_client.py, plus DPUB, REQ, TOUCH and backoff:
//
//	publish --nsqd-tcp-address H:P --topic T [--mode pub|mpub|dpub] [--batch K] [--delay-ms D]
//	        (--bodies-file F | --count N [--prefix P])
//	consume (--nsqd-tcp-address H:P | --lookupd-http-address URL) --topic T --channel C --count N
//	        [--max-in-flight M] [--fail-first K] [--touch] [--hold-ms H] [--msg-timeout-ms X]
//	bench-pub --nsqd-tcp-address H:P --topic T --count N [--body-size B] [--warmup W]
//	        (N synchronous Publish calls, one in flight; prints one JSON line with msgs_per_s, p50_us, p99_us)
//
// --compression none|snappy|deflate asks for stream compression; not being granted it is an error.
// stdout carries JSON lines only (one per acknowledged command, or per delivered message, or per
// backoff event of the consumer); logs go to stderr. Exit codes: 0 success, 1 error, 2 timeout,
// 3 compression requested but not granted.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

const (
	exitOK = iota
	exitError
	exitTimeout
	exitNotGranted
)

var out = json.NewEncoder(os.Stdout)
var outMu sync.Mutex

func emit(record map[string]interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	out.SetEscapeHTML(false)
	_ = out.Encode(record)
}

// watcher is go-nsq's logger: it copies every line to stderr and follows what the lines say, which is
// the only place go-nsq reports granted compression and its backoff state.
type watcher struct {
	mu       sync.Mutex
	granted  map[string]bool
	phase    string // "normal", "backoff" (all RDY 0) or "testing" (RDY 1 to test the waters)
	backoffs int
	stderr   *log.Logger
}

func newWatcher() *watcher {
	return &watcher{granted: map[string]bool{}, phase: "normal", stderr: log.New(os.Stderr, "", log.LstdFlags)}
}

func (w *watcher) Output(calldepth int, s string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case strings.Contains(s, "upgrading to Snappy"):
		w.granted["snappy"] = true
	case strings.Contains(s, "upgrading to Deflate"):
		w.granted["deflate"] = true
	case strings.Contains(s, "upgrading to TLS"):
		w.granted["tls"] = true
	case strings.Contains(s, "backing off for"):
		w.phase = "backoff"
		w.backoffs++
		emit(map[string]interface{}{"event": "backoff"})
	case strings.Contains(s, "backoff timeout expired, sending RDY 1"):
		w.phase = "testing"
		emit(map[string]interface{}{"event": "testing"})
	case strings.Contains(s, "exiting backoff"):
		w.phase = "normal"
		emit(map[string]interface{}{"event": "resume"})
	}
	return w.stderr.Output(calldepth+1, s)
}

func (w *watcher) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.phase
}

func (w *watcher) wasGranted(compression string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return compression == "none" || w.granted[compression]
}

type options struct {
	action      string
	nsqd        string
	lookupd     string
	topic       string
	channel     string
	mode        string
	batch       int
	delayMs     int
	bodiesFile  string
	count       int
	prefix      string
	compression string
	timeout     float64
	maxInFlight int
	failFirst   int
	touch       bool
	holdMs      int
	msgTimeout  int
	verbose     bool
	bodySize    int
	warmup      int
}

func parse(args []string) (*options, error) {
	if len(args) == 0 || (args[0] != "publish" && args[0] != "consume" && args[0] != "bench-pub") {
		return nil, errors.New("usage: nsqgo publish|consume|bench-pub [options]")
	}
	o := &options{action: args[0]}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.StringVar(&o.nsqd, "nsqd-tcp-address", "", "nsqd TCP address")
	fs.StringVar(&o.lookupd, "lookupd-http-address", "", "nsqlookupd HTTP address (consume)")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.channel, "channel", "", "channel (consume)")
	fs.StringVar(&o.mode, "mode", "pub", "pub, mpub or dpub (publish)")
	fs.IntVar(&o.batch, "batch", 10, "messages per MPUB")
	fs.IntVar(&o.delayMs, "delay-ms", 0, "DPUB delay")
	fs.StringVar(&o.bodiesFile, "bodies-file", "", "JSON array of bodies")
	fs.IntVar(&o.count, "count", 0, "messages to publish or to consume")
	fs.StringVar(&o.prefix, "prefix", "msg", "body prefix with --count")
	fs.StringVar(&o.compression, "compression", "none", "none, snappy or deflate")
	fs.Float64Var(&o.timeout, "timeout", 30, "seconds before giving up (exit 2)")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 1, "consumer max in flight")
	fs.IntVar(&o.failFirst, "fail-first", 0, "the first K handler calls fail (REQ with backoff)")
	fs.BoolVar(&o.touch, "touch", false, "TOUCH while holding each message")
	fs.IntVar(&o.holdMs, "hold-ms", 0, "hold each message this long before finishing it")
	fs.IntVar(&o.msgTimeout, "msg-timeout-ms", 0, "IDENTIFY msg_timeout (0: the server's)")
	fs.BoolVar(&o.verbose, "verbose", false, "debug logs")
	fs.IntVar(&o.bodySize, "body-size", 1024, "body bytes (bench-pub)")
	fs.IntVar(&o.warmup, "warmup", 200, "untimed publishes before the timed ones (bench-pub)")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if o.topic == "" {
		return nil, errors.New("--topic is required")
	}
	if o.compression != "none" && o.compression != "snappy" && o.compression != "deflate" {
		return nil, fmt.Errorf("--compression: %q is not none, snappy or deflate", o.compression)
	}
	if (o.action == "publish" || o.action == "bench-pub") && o.nsqd == "" {
		return nil, errors.New(o.action + " needs --nsqd-tcp-address")
	}
	if o.action == "bench-pub" && (o.count <= 0 || o.bodySize <= 0) {
		return nil, errors.New("bench-pub needs --count N > 0 and --body-size B > 0")
	}
	if o.action == "consume" {
		if (o.nsqd == "") == (o.lookupd == "") {
			return nil, errors.New("consume needs one of --nsqd-tcp-address, --lookupd-http-address")
		}
		if o.channel == "" || o.count <= 0 {
			return nil, errors.New("consume needs --channel and --count N > 0")
		}
	}
	return o, nil
}

func config(o *options) *nsq.Config {
	c := nsq.NewConfig()
	c.Snappy = o.compression == "snappy"
	c.Deflate = o.compression == "deflate"
	c.MaxInFlight = o.maxInFlight
	c.LookupdPollInterval = time.Second
	// Short requeue and backoff durations, so a test sees REQ and backoff come and go in seconds.
	c.DefaultRequeueDelay = 200 * time.Millisecond
	c.BackoffMultiplier = 100 * time.Millisecond
	c.MaxBackoffDuration = 400 * time.Millisecond
	c.MaxAttempts = 0
	if o.msgTimeout > 0 {
		c.MsgTimeout = time.Duration(o.msgTimeout) * time.Millisecond
	}
	return c
}

func loadBodies(o *options) ([][]byte, error) {
	var bodies [][]byte
	if o.bodiesFile != "" {
		data, err := os.ReadFile(o.bodiesFile)
		if err != nil {
			return nil, err
		}
		var texts []string
		if err := json.Unmarshal(data, &texts); err != nil {
			return nil, fmt.Errorf("%s: %w", o.bodiesFile, err)
		}
		for _, t := range texts {
			bodies = append(bodies, []byte(t))
		}
		return bodies, nil
	}
	for i := 0; i < o.count; i++ {
		bodies = append(bodies, []byte(fmt.Sprintf("%s-%d", o.prefix, i)))
	}
	return bodies, nil
}

func level(o *options) nsq.LogLevel {
	if o.verbose {
		return nsq.LogLevelDebug
	}
	return nsq.LogLevelInfo
}

func publish(o *options, w *watcher) int {
	bodies, err := loadBodies(o)
	if err != nil {
		log.Printf("bodies: %s", err)
		return exitError
	}
	producer, err := nsq.NewProducer(o.nsqd, config(o))
	if err != nil {
		log.Printf("producer: %s", err)
		return exitError
	}
	producer.SetLogger(w, level(o))
	defer producer.Stop()
	if err := producer.Ping(); err != nil {
		log.Printf("connect: %s", err)
		return exitError
	}
	if !w.wasGranted(o.compression) {
		log.Printf("nsqd did not grant %s", o.compression)
		return exitNotGranted
	}
	switch o.mode {
	case "pub", "dpub":
		for _, body := range bodies {
			command := "PUB"
			if o.mode == "dpub" {
				command = "DPUB"
				err = producer.DeferredPublish(o.topic, time.Duration(o.delayMs)*time.Millisecond, body)
			} else {
				err = producer.Publish(o.topic, body)
			}
			if err != nil {
				log.Printf("%s failed: %s", command, err)
				return exitError
			}
			emit(map[string]interface{}{"command": command, "messages": 1, "response": "OK"})
		}
	case "mpub":
		for i := 0; i < len(bodies); i += o.batch {
			end := i + o.batch
			if end > len(bodies) {
				end = len(bodies)
			}
			if err := producer.MultiPublish(o.topic, bodies[i:end]); err != nil {
				log.Printf("MPUB failed: %s", err)
				return exitError
			}
			emit(map[string]interface{}{"command": "MPUB", "messages": end - i, "response": "OK"})
		}
	default:
		log.Printf("--mode: %q is not pub, mpub or dpub", o.mode)
		return exitError
	}
	return exitOK
}

// benchPublish times o.count synchronous Publish calls of o.bodySize-byte bodies, one in flight: each
// call returns only when nsqd has answered OK, so the rate is the inverse of the round trip.
func benchPublish(o *options, w *watcher) int {
	producer, err := nsq.NewProducer(o.nsqd, config(o))
	if err != nil {
		log.Printf("producer: %s", err)
		return exitError
	}
	producer.SetLogger(w, nsq.LogLevelWarning)
	defer producer.Stop()
	if err := producer.Ping(); err != nil {
		log.Printf("connect: %s", err)
		return exitError
	}
	body := make([]byte, o.bodySize)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	for i := 0; i < o.warmup; i++ {
		if err := producer.Publish(o.topic, body); err != nil {
			log.Printf("PUB failed: %s", err)
			return exitError
		}
	}
	rtts := make([]time.Duration, o.count)
	start := time.Now()
	for i := 0; i < o.count; i++ {
		t0 := time.Now()
		if err := producer.Publish(o.topic, body); err != nil {
			log.Printf("PUB failed: %s", err)
			return exitError
		}
		rtts[i] = time.Since(t0)
	}
	elapsed := time.Since(start)
	sort.Slice(rtts, func(a, b int) bool { return rtts[a] < rtts[b] })
	pct := func(p float64) float64 {
		return float64(rtts[int(p*float64(len(rtts)-1))].Nanoseconds()) / 1e3
	}
	emit(map[string]interface{}{
		"messages":   o.count + o.warmup,
		"timed":      o.count,
		"seconds":    elapsed.Seconds(),
		"msgs_per_s": float64(o.count) / elapsed.Seconds(),
		"p50_us":     pct(0.50),
		"p99_us":     pct(0.99),
	})
	return exitOK
}

type handler struct {
	o        *options
	w        *watcher
	mu       sync.Mutex
	calls    int
	finished int
	done     chan struct{}
}

func (h *handler) HandleMessage(m *nsq.Message) error {
	phase := h.w.state()
	h.mu.Lock()
	h.calls++
	fail := h.calls <= h.o.failFirst
	h.mu.Unlock()
	record := map[string]interface{}{
		"body": string(m.Body), "attempts": m.Attempts, "id": string(m.ID[:]), "phase": phase,
	}
	if fail {
		record["action"] = "req"
		emit(record)
		return errors.New("failing on purpose (--fail-first)")
	}
	if h.o.holdMs > 0 {
		deadline := time.Now().Add(time.Duration(h.o.holdMs) * time.Millisecond)
		touches := 0
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			if h.o.touch {
				m.Touch()
				touches++
			}
		}
		record["touches"] = touches
	}
	record["action"] = "fin"
	emit(record)
	h.mu.Lock()
	h.finished++
	if h.finished == h.o.count {
		close(h.done)
	}
	h.mu.Unlock()
	return nil
}

func consume(o *options, w *watcher, deadline <-chan time.Time) int {
	consumer, err := nsq.NewConsumer(o.topic, o.channel, config(o))
	if err != nil {
		log.Printf("consumer: %s", err)
		return exitError
	}
	consumer.SetLogger(w, level(o))
	h := &handler{o: o, w: w, done: make(chan struct{})}
	consumer.AddHandler(h)
	if o.nsqd != "" {
		err = consumer.ConnectToNSQD(o.nsqd)
	} else {
		err = consumer.ConnectToNSQLookupd(o.lookupd)
	}
	if err != nil {
		log.Printf("connect: %s", err)
		return exitError
	}
	code := exitOK
	select {
	case <-h.done:
	case <-consumer.StopChan:
		log.Printf("consumer stopped unexpectedly")
		code = exitError
	case <-deadline:
		log.Printf("timed out after %.1fs", o.timeout)
		return exitTimeout
	}
	if code == exitOK && !w.wasGranted(o.compression) {
		log.Printf("nsqd did not grant %s", o.compression)
		code = exitNotGranted
	}
	consumer.Stop() // CLS, then waits for the FINs in flight and the close
	select {
	case <-consumer.StopChan:
	case <-deadline:
		log.Printf("timed out stopping")
		return exitTimeout
	}
	return code
}

func main() {
	log.SetOutput(os.Stderr)
	o, err := parse(os.Args[1:])
	if err != nil {
		log.Print(err)
		os.Exit(exitError)
	}
	w := newWatcher()
	deadline := time.After(time.Duration(o.timeout * float64(time.Second)))
	result := make(chan int, 1)
	go func() {
		if o.action == "publish" {
			result <- publish(o, w)
		} else if o.action == "bench-pub" {
			result <- benchPublish(o, w)
		} else {
			result <- consume(o, w, deadline)
		}
	}()
	select {
	case code := <-result:
		os.Exit(code)
	case <-deadline:
		log.Printf("timed out after %.1fs", o.timeout)
		os.Exit(exitTimeout)
	}
}
