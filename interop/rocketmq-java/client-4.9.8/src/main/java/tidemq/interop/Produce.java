package tidemq.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * {@code produce --topic T --mode sync|async|oneway|batch|ordered|delay --count N}: DefaultMQProducer's
 * send paths, one "sent" record per message (a batch prints one record with every id).
 * ordered: {@code --shards K} sharding keys, each pinned to one queue by a MessageQueueSelector;
 * delay: {@code --delay-level L}. {@code --props k=v,k=v} (repeatable) gives message i the (i mod n)-th set of
 * user properties.
 */
final class Produce {
    private Produce() {
    }

    static int run(Peer.Options opts) throws Exception {
        String topic = opts.need("topic");
        int count = opts.integer("count", 1);
        DefaultMQProducer producer = new DefaultMQProducer(opts.get("group", "java_peer_producer"), Peer.rpcHook(opts));
        producer.setNamesrvAddr(opts.need("namesrv"));
        producer.setInstanceName("peer-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout(opts.integer("send-timeout-ms", 5000));
        producer.setRetryTimesWhenSendFailed(opts.integer("retries", 2));
        producer.start();
        int failures = 0;
        try {
            for (String mode : opts.get("mode", "sync").split(",")) {
                failures += send(producer, opts, mode, topic, count);
            }
        } finally {
            producer.shutdown();
        }
        Peer.emit(Peer.record("event", "done", "failures", failures));
        return failures == 0 ? 0 : 1;
    }

    /** One mode's sends; with several modes in one run, each body starts with its mode. */
    private static int send(DefaultMQProducer producer, Peer.Options opts, String mode, String topic, int count)
        throws Exception {
        if (opts.get("mode", "sync").contains(",")) {
            opts.set("body-prefix", mode + "-");
        }
        int failures = 0;
        switch (mode) {
            case "sync":
            case "delay":
                for (int i = 0; i < count; i++) {
                    Message msg = Msgs.build(opts, topic, i);
                    if (mode.equals("delay")) {
                        msg.setDelayTimeLevel(opts.integer("delay-level", 1));
                    }
                    try {
                        Peer.emit(Msgs.sent(mode, i, msg, producer.send(msg)));
                    } catch (Exception e) {
                        failures++;
                        Peer.emit(Msgs.failure("send-failed", e));
                    }
                }
                break;
            case "async":
                failures = async(producer, opts, topic, count);
                break;
            case "oneway":
                for (int i = 0; i < count; i++) {
                    Message msg = Msgs.build(opts, topic, i);
                    producer.sendOneway(msg);
                    Peer.emit(Msgs.sent(mode, i, msg, null));
                }
                break;
            case "batch":
                List<Message> batch = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    batch.add(Msgs.build(opts, topic, i));
                }
                SendResult r = producer.send(batch);
                Peer.emit(Msgs.sent(mode, 0, batch.get(0), r));
                break;
            case "ordered":
                int shards = opts.integer("shards", 3);
                MessageQueueSelector byKey = (List<MessageQueue> mqs, Message m, Object arg) ->
                    mqs.get(Math.floorMod(arg.hashCode(), mqs.size()));
                for (int i = 0; i < count; i++) {
                    Message msg = Msgs.build(opts, topic, i);
                    String shard = "shard-" + (i % shards);
                    msg.putUserProperty("shard", shard);
                    Peer.emit(Msgs.sent(mode, i, msg, producer.send(msg, byKey, shard)));
                }
                break;
            default:
                throw new IllegalArgumentException("--mode must be sync, async, oneway, batch, ordered or delay");
        }
        return failures;
    }

    private static int async(DefaultMQProducer producer, Peer.Options opts, String topic, int count)
        throws Exception {
        CountDownLatch done = new CountDownLatch(count);
        int[] failures = {0};
        for (int i = 0; i < count; i++) {
            final int index = i;
            final Message msg = Msgs.build(opts, topic, i);
            producer.send(msg, new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    Peer.emit(Msgs.sent("async", index, msg, r));
                    done.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    synchronized (failures) {
                        failures[0]++;
                    }
                    Peer.emit(Msgs.failure("send-failed", e));
                    done.countDown();
                }
            });
        }
        if (!done.await(opts.integer("send-timeout-ms", 5000) * 3L, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("async sends did not all complete");
        }
        synchronized (failures) {
            return failures[0];
        }
    }
}
