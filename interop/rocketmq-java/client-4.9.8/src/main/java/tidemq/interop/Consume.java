package tidemq.interop;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/**
 * {@code consume --topic T --group G --mode concurrent|orderly|broadcast}: DefaultMQPushConsumer from the
 * first offset, subscribed with {@code --selector tag|sql} and {@code --expression} (a start the client
 * refuses prints "start-failed" with the broker's code and exits 1). Each delivery prints a "received" record (with the instance that got it); a message's
 * first {@code --fail-first N} deliveries (of bodies containing {@code --fail-match}, default all) answer RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT),
 * retried after {@code --retry-delay-level} (concurrent) up to {@code --max-reconsume} times.
 * {@code --instances K} starts K consumers of the group in this JVM. Stops once {@code --expect} distinct
 * bodies were consumed per instance (or {@code --expect-deliveries} deliveries in all), then lingers
 * {@code --linger-ms} so that offsets and sent-back messages reach the broker before shutdown.
 */
final class Consume {
    private final Map<String, Integer> deliveries = new HashMap<>();
    private final Map<String, Set<String>> consumed = new HashMap<>();
    private int totalDeliveries;
    private final int failFirst;
    private final String failMatch;
    private final int retryDelayLevel;

    private Consume(Peer.Options opts) {
        failFirst = opts.integer("fail-first", 0);
        failMatch = opts.get("fail-match", "");
        retryDelayLevel = opts.integer("retry-delay-level", 1);
    }

    /** Records one delivery and says whether the listener fails it. */
    private synchronized boolean deliver(String instance, MessageExt msg) {
        String key = instance + "/" + Peer.text(msg.getBody());
        int seen = deliveries.merge(key, 1, Integer::sum);
        totalDeliveries++;
        boolean fail = seen <= failFirst && Peer.text(msg.getBody()).contains(failMatch);
        Map<String, Object> rec = Msgs.received("received", msg);
        rec.put("instance", instance);
        rec.put("delivery", seen);
        rec.put("failed", fail);
        Peer.emit(rec);
        if (!fail) {
            consumed.computeIfAbsent(instance, k -> new HashSet<>()).add(Peer.text(msg.getBody()));
        }
        notifyAll();
        return fail;
    }

    private synchronized boolean finished(int instances, int expect, int expectDeliveries) {
        if (expectDeliveries > 0) {
            return totalDeliveries >= expectDeliveries;
        }
        if (consumed.size() < instances) {
            return false;
        }
        for (Set<String> bodies : consumed.values()) {
            if (bodies.size() < expect) {
                return false;
            }
        }
        return true;
    }

    static int run(Peer.Options opts, long timeoutMs) throws Exception {
        String mode = opts.get("mode", "concurrent");
        if (!List.of("concurrent", "orderly", "broadcast").contains(mode)) {
            throw new IllegalArgumentException("--mode must be concurrent, orderly or broadcast");
        }
        Consume state = new Consume(opts);
        int instances = opts.integer("instances", 1);
        int expect = opts.integer("expect", 0);
        int expectDeliveries = opts.integer("expect-deliveries", 0);
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (int n = 0; n < instances; n++) {
            String instance = "peer-" + ProcessHandle.current().pid() + "-" + n;
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(opts.need("group"), Peer.rpcHook(opts),
                new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(opts.need("namesrv"));
            c.setInstanceName(instance);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(opts.need("topic"), Peer.selector(opts));
            c.setMaxReconsumeTimes(opts.integer("max-reconsume", 16));
            c.setPullBatchSize(opts.integer("pull-batch-size", 32));
            if (mode.equals("broadcast")) {
                c.setMessageModel(MessageModel.BROADCASTING);
            }
            if (mode.equals("orderly")) {
                c.setSuspendCurrentQueueTimeMillis(opts.integer("suspend-ms", 200));
                c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        if (state.deliver(instance, m)) {
                            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                        }
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                });
            } else {
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        if (state.deliver(instance, m)) {
                            ctx.setDelayLevelWhenNextConsume(state.retryDelayLevel);
                            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                        }
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
            }
            consumers.add(c);
        }
        try {
            for (DefaultMQPushConsumer c : consumers) {
                c.start();
            }
        } catch (MQClientException e) {
            // e.g. the broker's CHECK_CLIENT_CONFIG refusing a SQL92 expression it cannot parse.
            Peer.emit(Msgs.failure("start-failed", e));
            return 1;
        }
        Peer.emit(Peer.record("event", "started", "instances", instances));
        long deadline = System.currentTimeMillis() + timeoutMs;
        synchronized (state) {
            while (!state.finished(instances, expect, expectDeliveries) && System.currentTimeMillis() < deadline) {
                state.wait(200);
            }
        }
        Thread.sleep(opts.integer("linger-ms", 1500));
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
        synchronized (state) {
            Peer.emit(Peer.record("event", "done", "deliveries", state.totalDeliveries));
        }
        return 0;
    }
}
