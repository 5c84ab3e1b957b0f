// Command peer drives rocketmq-client-go v2 (the Go client) against a RocketMQ name server for the
// tidemq tests: one sub-command per role (produce, consume), options as --name value, one JSON object
// per line on stdout for the test to assert on. The client's own logs go to stderr. Exits 2 when
// --timeout seconds pass first, so a hung peer fails its test instead of the suite.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

var outMu sync.Mutex

// emit prints one JSON record on stdout.
func emit(rec map[string]interface{}) {
	line, err := json.Marshal(rec)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"event":"unprintable","error":%q}`, err.Error()))
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "peer: "+format+"\n", args...)
	os.Exit(2)
}

// received is what the tests compare of a delivered message.
func received(event string, m *primitive.MessageExt) map[string]interface{} {
	props := map[string]string{}
	for k, v := range m.GetProperties() {
		props[k] = v
	}
	rec := map[string]interface{}{
		"event":          event,
		"topic":          m.Topic,
		"body":           string(m.Body),
		"bodyLen":        len(m.Body),
		"tags":           m.GetTags(),
		"keys":           m.GetKeys(),
		"msgId":          m.MsgId,
		"offsetMsgId":    m.OffsetMsgId,
		"queueId":        -1,
		"queueOffset":    m.QueueOffset,
		"reconsumeTimes": m.ReconsumeTimes,
		"storeHost":      m.StoreHost,
		"bornTimestamp":  m.BornTimestamp,
		"storeTimestamp": m.StoreTimestamp,
		"sysFlag":        m.SysFlag,
		"properties":     props,
	}
	if m.Queue != nil {
		rec["queueId"] = m.Queue.QueueId
		rec["brokerName"] = m.Queue.BrokerName
	}
	return rec
}

type options struct {
	namesrv, topic, group, mode, tag, bodyPrefix, keyPrefix, failMatch           string
	count, shards, delayLevel, failFirst, maxReconsume, expect, expectDeliveries int
	retryDelayLevel, instances, lingerMs, window                                 int
	timeout, cap                                                                 float64
}

func parse(name string, args []string) options {
	var o options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&o.namesrv, "namesrv", "", "name server host:port")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.group, "group", "go_peer", "producer or consumer group")
	fs.StringVar(&o.mode, "mode", "", "produce: sync,async,oneway,batch,ordered,delay; consume: concurrent|orderly|broadcast")
	fs.StringVar(&o.tag, "tag", "TagG", "tag of produced messages")
	fs.StringVar(&o.bodyPrefix, "body-prefix", "go-", "body of message i is the prefix and i")
	fs.StringVar(&o.keyPrefix, "key-prefix", "gk-", "key of message i is the prefix and i")
	fs.StringVar(&o.failMatch, "fail-match", "", "only bodies containing this fail")
	fs.IntVar(&o.count, "count", 1, "messages per produce mode")
	fs.IntVar(&o.shards, "shards", 2, "ordered: sharding keys")
	fs.IntVar(&o.delayLevel, "delay-level", 1, "delay: the level")
	fs.IntVar(&o.failFirst, "fail-first", 0, "a message's first N deliveries answer retry later")
	fs.IntVar(&o.maxReconsume, "max-reconsume", 16, "max reconsume times")
	fs.IntVar(&o.expect, "expect", 0, "stop once this many distinct bodies were consumed per instance")
	fs.IntVar(&o.expectDeliveries, "expect-deliveries", 0, "or once this many deliveries in all")
	fs.IntVar(&o.retryDelayLevel, "retry-delay-level", 1, "delay level of a message sent back")
	fs.IntVar(&o.instances, "instances", 1, "consumers of the group in this process")
	fs.IntVar(&o.lingerMs, "linger-ms", 1500, "wait before shutdown, for offsets and sent-back messages")
	fs.Float64Var(&o.timeout, "timeout", 60, "seconds before giving up (exit 2)")
	fs.IntVar(&o.window, "window", 256, "bench: sends unanswered at once")
	fs.Float64Var(&o.cap, "cap", 60, "bench: seconds before the send loop stops")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if o.namesrv == "" || o.topic == "" {
		fail("--namesrv and --topic are required")
	}
	return o
}

func main() {
	if len(os.Args) < 2 {
		fail("a sub-command is required: produce, consume or bench")
	}
	rlog.SetLogLevel("warn")
	o := parse(os.Args[1], os.Args[2:])
	go func() {
		time.Sleep(time.Duration(o.timeout * float64(time.Second)))
		emit(map[string]interface{}{"event": "timeout"})
		os.Exit(2)
	}()
	var rc int
	switch os.Args[1] {
	case "produce":
		rc = produce(o)
	case "consume":
		rc = consume(o)
	case "bench":
		rc = bench(o)
	default:
		fail("unknown sub-command %s", os.Args[1])
	}
	os.Exit(rc)
}
