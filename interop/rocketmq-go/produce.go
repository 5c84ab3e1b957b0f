package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

func build(o options, prefix string, i int) *primitive.Message {
	m := primitive.NewMessage(o.topic, []byte(fmt.Sprintf("%s%d", prefix, i)))
	m.WithTag(o.tag)
	m.WithKeys([]string{fmt.Sprintf("%s%d", o.keyPrefix, i)})
	m.WithProperty("idx", fmt.Sprint(i))
	return m
}

func sent(mode string, i int, m *primitive.Message, r *primitive.SendResult) map[string]interface{} {
	rec := map[string]interface{}{"event": "sent", "mode": mode, "index": i, "body": string(m.Body)}
	if r != nil {
		rec["status"] = r.Status
		rec["msgId"] = r.MsgID
		rec["offsetMsgId"] = r.OffsetMsgID
		rec["queueOffset"] = r.QueueOffset
		if r.MessageQueue != nil {
			rec["queueId"] = r.MessageQueue.QueueId
			rec["brokerName"] = r.MessageQueue.BrokerName
		}
	}
	return rec
}

func failed(err error) map[string]interface{} {
	return map[string]interface{}{"event": "send-failed", "error": err.Error()}
}

// produce sends --count messages in each of the comma-separated --mode values (bodies "<mode>-<i>"
// when there are several); ordered messages go by sharding key through the hash queue selector.
func produce(o options) int {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{o.namesrv})),
		producer.WithGroupName(o.group),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(5*time.Second),
		producer.WithQueueSelector(producer.NewHashQueueSelector()),
	)
	if err != nil {
		fail("producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail("producer start: %v", err)
	}
	defer p.Shutdown()
	ctx := context.Background()
	failures := 0
	modes := strings.Split(o.mode, ",")
	for _, mode := range modes {
		prefix := o.bodyPrefix
		if len(modes) > 1 {
			prefix = mode + "-"
		}
		switch mode {
		case "sync", "delay", "ordered":
			for i := 0; i < o.count; i++ {
				m := build(o, prefix, i)
				if mode == "delay" {
					m.WithDelayTimeLevel(o.delayLevel)
				}
				if mode == "ordered" {
					shard := fmt.Sprintf("shard-%d", i%o.shards)
					m.WithShardingKey(shard)
					m.WithProperty("shard", shard)
				}
				r, err := p.SendSync(ctx, m)
				if err != nil {
					failures++
					emit(failed(err))
					continue
				}
				emit(sent(mode, i, m, r))
			}
		case "async":
			var wg sync.WaitGroup
			var mu sync.Mutex
			for i := 0; i < o.count; i++ {
				i, m := i, build(o, prefix, i)
				wg.Add(1)
				err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						failures++
						mu.Unlock()
						emit(failed(err))
						return
					}
					emit(sent(mode, i, m, r))
				}, m)
				if err != nil {
					wg.Done()
					failures++
					emit(failed(err))
				}
			}
			wg.Wait()
		case "oneway":
			for i := 0; i < o.count; i++ {
				m := build(o, prefix, i)
				if err := p.SendOneWay(ctx, m); err != nil {
					failures++
					emit(failed(err))
					continue
				}
				emit(sent(mode, i, m, nil))
			}
		case "batch":
			var batch []*primitive.Message
			for i := 0; i < o.count; i++ {
				batch = append(batch, build(o, prefix, i))
			}
			r, err := p.SendSync(ctx, batch...)
			if err != nil {
				failures++
				emit(failed(err))
				continue
			}
			emit(sent(mode, 0, batch[0], r))
		default:
			fail("--mode must be sync, async, oneway, batch, ordered or delay, not %s", mode)
		}
	}
	emit(map[string]interface{}{"event": "done", "failures": failures})
	if failures > 0 {
		return 1
	}
	return 0
}
