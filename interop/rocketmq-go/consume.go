package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// tally counts deliveries per instance and body, and says which ones fail.
type tally struct {
	mu         sync.Mutex
	o          options
	deliveries map[string]int
	consumed   map[string]map[string]bool
	total      int
	changed    chan struct{}
}

func (t *tally) deliver(instance string, m *primitive.MessageExt) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := instance + "/" + string(m.Body)
	t.deliveries[key]++
	seen := t.deliveries[key]
	t.total++
	fail := seen <= t.o.failFirst && strings.Contains(string(m.Body), t.o.failMatch)
	rec := received("received", m)
	rec["instance"], rec["delivery"], rec["failed"] = instance, seen, fail
	emit(rec)
	if !fail {
		if t.consumed[instance] == nil {
			t.consumed[instance] = map[string]bool{}
		}
		t.consumed[instance][string(m.Body)] = true
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
	return fail
}

func (t *tally) finished() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.o.expectDeliveries > 0 {
		return t.total >= t.o.expectDeliveries
	}
	if len(t.consumed) < t.o.instances {
		return false
	}
	for _, bodies := range t.consumed {
		if len(bodies) < t.o.expect {
			return false
		}
	}
	return true
}

// consume runs --instances push consumers of --group from the first offset until --expect distinct
// bodies per instance (or --expect-deliveries in all) were seen, then lingers and shuts down.
func consume(o options) int {
	t := &tally{o: o, deliveries: map[string]int{}, consumed: map[string]map[string]bool{},
		changed: make(chan struct{}, 1)}
	var consumers []rocketmq.PushConsumer
	for n := 0; n < o.instances; n++ {
		instance := fmt.Sprintf("peer-%d-%d", os.Getpid(), n)
		opts := []consumer.Option{
			consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{o.namesrv})),
			consumer.WithGroupName(o.group),
			consumer.WithInstance(instance),
			consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
			consumer.WithMaxReconsumeTimes(int32(o.maxReconsume)),
		}
		switch o.mode {
		case "concurrent", "":
		case "orderly":
			opts = append(opts, consumer.WithConsumerOrder(true),
				consumer.WithSuspendCurrentQueueTimeMillis(200*time.Millisecond))
		case "broadcast":
			opts = append(opts, consumer.WithConsumerModel(consumer.BroadCasting))
		default:
			fail("--mode must be concurrent, orderly or broadcast")
		}
		c, err := rocketmq.NewPushConsumer(opts...)
		if err != nil {
			fail("consumer: %v", err)
		}
		err = c.Subscribe(o.topic, consumer.MessageSelector{}, func(ctx context.Context,
			msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				if t.deliver(instance, m) {
					if o.mode == "orderly" {
						return consumer.SuspendCurrentQueueAMoment, nil
					}
					if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
						cc.DelayLevelWhenNextConsume = o.retryDelayLevel
					}
					return consumer.ConsumeRetryLater, nil
				}
			}
			return consumer.ConsumeSuccess, nil
		})
		if err != nil {
			fail("subscribe: %v", err)
		}
		consumers = append(consumers, c)
	}
	for _, c := range consumers {
		if err := c.Start(); err != nil {
			fail("consumer start: %v", err)
		}
	}
	emit(map[string]interface{}{"event": "started", "instances": o.instances})
	for !t.finished() {
		select {
		case <-t.changed:
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(time.Duration(o.lingerMs) * time.Millisecond)
	for _, c := range consumers {
		_ = c.Shutdown()
	}
	t.mu.Lock()
	emit(map[string]interface{}{"event": "done", "deliveries": t.total})
	t.mu.Unlock()
	return 0
}
