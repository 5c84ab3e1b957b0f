package tidemq.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * {@code transact --topic T --local STATE,STATE,... [--answers STATE,STATE,...] [--checks N] [--linger-ms MS]}:
 * TransactionMQProducer.sendMessageInTransaction once per {@code --local} entry, whose listener's
 * executeLocalTransaction answers that state (COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW) for message i.
 * checkLocalTransaction answers the broker's k-th check of a message with the k-th {@code --answers} state
 * (the last one repeats; COMMIT_MESSAGE when none is given). Prints "executed", "sent" and "checked"
 * records, waits until {@code --checks} checks came in, then lingers so the last answer leaves the client.
 */
final class Transact {
    private Transact() {
    }

    static int run(Peer.Options opts) throws Exception {
        String topic = opts.need("topic");
        List<LocalTransactionState> local = states(opts.need("local"));
        List<LocalTransactionState> answers = states(opts.get("answers", "COMMIT_MESSAGE"));
        int expectedChecks = opts.integer("checks", 0);
        Map<String, AtomicInteger> checksOf = new ConcurrentHashMap<>();
        AtomicInteger checks = new AtomicInteger();

        TransactionMQProducer producer = new TransactionMQProducer(opts.get("group", "java_peer_tx_producer"));
        producer.setNamesrvAddr(opts.need("namesrv"));
        producer.setInstanceName("peer-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout(opts.integer("send-timeout-ms", 5000));
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                LocalTransactionState state = local.get((Integer) arg);
                Peer.emit(Peer.record("event", "executed", "index", arg, "state", state.name(),
                    "transactionId", msg.getTransactionId()));
                return state;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                int nth = checksOf.computeIfAbsent(msg.getTransactionId(), k -> new AtomicInteger()).incrementAndGet();
                LocalTransactionState state = answers.get(Math.min(nth, answers.size()) - 1);
                Map<String, Object> rec = Msgs.received("checked", msg);
                rec.put("transactionId", msg.getTransactionId());
                rec.put("nth", nth);
                rec.put("state", state.name());
                Peer.emit(rec);
                checks.incrementAndGet();
                return state;
            }
        });
        producer.start();
        int failures = 0;
        try {
            for (int i = 0; i < local.size(); i++) {
                Message msg = Msgs.build(opts, topic, i);
                try {
                    TransactionSendResult r = producer.sendMessageInTransaction(msg, i);
                    Map<String, Object> rec = Msgs.sent("transaction", i, msg, r);
                    rec.put("localState", r.getLocalTransactionState().name());
                    rec.put("transactionId", r.getTransactionId());
                    Peer.emit(rec);
                } catch (Exception e) {
                    failures++;
                    Peer.emit(Msgs.failure("send-failed", e));
                }
            }
            while (checks.get() < expectedChecks) {
                Thread.sleep(50);
            }
            Thread.sleep(opts.integer("linger-ms", 500));
        } finally {
            producer.shutdown();
        }
        Peer.emit(Peer.record("event", "done", "failures", failures, "checks", checks.get()));
        return failures == 0 ? 0 : 1;
    }

    private static List<LocalTransactionState> states(String list) {
        List<LocalTransactionState> out = new ArrayList<>();
        for (String name : list.split(",")) {
            try {
                out.add(LocalTransactionState.valueOf(name));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("unknown transaction state " + name
                    + ": COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW");
            }
        }
        return out;
    }
}
