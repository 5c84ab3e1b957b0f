package tidemq.interop;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * {@code litepull --topic T --group G --mode subscribe|assign [--before-seek M] [--seek N] --expect N}:
 * DefaultLitePullConsumer either subscribed (rebalanced, auto-commit) or assigned every queue of the topic,
 * ({@code --selector tag|sql} with {@code --expression}), M messages polled, then seeked to offset N in each, then committed. Prints each polled message and, at the end, the committed offsets it sees.
 */
final class LitePull {
    private LitePull() {
    }

    static int run(Peer.Options opts, long timeoutMs) throws Exception {
        String topic = opts.need("topic");
        String mode = opts.get("mode", "subscribe");
        int expect = opts.integer("expect", 1);
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(opts.need("group"), Peer.rpcHook(opts));
        c.setNamesrvAddr(opts.need("namesrv"));
        c.setInstanceName("peer-" + ProcessHandle.current().pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollTimeoutMillis(1000);
        List<MessageQueue> assigned = new ArrayList<>();
        if (mode.equals("subscribe")) {
            c.subscribe(topic, Peer.selector(opts));
            c.start();
        } else if (mode.equals("assign")) {
            c.setAutoCommit(false);
            c.start();
            Collection<MessageQueue> mqs = c.fetchMessageQueues(topic);
            assigned.addAll(mqs);
            assigned.sort(null);
            c.assign(assigned);
            // Read what is there first, so that no pull is in flight when seeking: a pull answered after
            // seek() has taken its new offset is still handed to poll() by the 4.9.8 client.
            int beforeSeek = opts.integer("before-seek", 0);
            Set<String> first = new HashSet<>();
            long firstDeadline = System.currentTimeMillis() + timeoutMs / 2;
            while (first.size() < beforeSeek && System.currentTimeMillis() < firstDeadline) {
                for (MessageExt m : c.poll()) {
                    first.add(Peer.text(m.getBody()));
                    Peer.emit(Msgs.received("received-before-seek", m));
                }
            }
            long seek = opts.integer("seek", 0);
            for (MessageQueue mq : assigned) {
                try {
                    c.seek(mq, seek);
                } catch (MQClientException e) {
                    // Java checks the offset against the queue's min and max offsets on the broker.
                    Peer.emit(Peer.record("event", "seek-illegal", "queueId", mq.getQueueId(), "error", e.getErrorMessage()));
                }
            }
            Peer.emit(Peer.record("event", "assigned", "queues", assigned.size()));
        } else {
            throw new IllegalArgumentException("--mode must be subscribe or assign");
        }
        Set<String> bodies = new HashSet<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (bodies.size() < expect && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll()) {
                bodies.add(Peer.text(m.getBody()));
                Peer.emit(Msgs.received("received", m));
            }
        }
        if (mode.equals("assign")) {
            c.commitSync();
            for (MessageQueue mq : assigned) {
                Peer.emit(Peer.record("event", "committed", "queueId", mq.getQueueId(),
                    "brokerName", mq.getBrokerName(), "offset", c.committed(mq)));
            }
        }
        Thread.sleep(opts.integer("linger-ms", 500));
        c.shutdown();
        Peer.emit(Peer.record("event", "done", "distinct", bodies.size()));
        return 0;
    }
}
