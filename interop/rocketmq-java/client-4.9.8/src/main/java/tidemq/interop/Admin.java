package tidemq.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.admin.TopicOffset;
import org.apache.rocketmq.common.admin.TopicStatsTable;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.body.Connection;
import org.apache.rocketmq.common.protocol.body.ConsumerConnection;
import org.apache.rocketmq.common.protocol.body.ConsumerRunningInfo;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.QueueData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.tools.admin.api.MessageTrack;

/**
 * {@code admin --call NAME[:ARG[:ARG]] ...}: what {@code mqadmin} asks through DefaultMQAdminExt, each call
 * one "admin" record ({@code ok} with a {@code result}, or the error and its response code):
 * clusterList, topicList, topicRoute:T, topicStatus:T, updateTopic:T:QUEUES (on every master of every
 * cluster, as {@code mqadmin updateTopic -c}), consumerProgress:G, consumerConnection:G,
 * queryMsgById:T:ID (an offset id or a unique key, as {@code viewMessage(topic, id)}), queryMsgByKey:T:KEY.
 */
final class Admin {
    private Admin() {
    }

    static int run(Peer.Options opts) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(Peer.rpcHook(opts));
        admin.setNamesrvAddr(opts.need("namesrv"));
        admin.setInstanceName("peer-admin-" + ProcessHandle.current().pid());
        admin.start();
        int failures = 0;
        try {
            for (String call : opts.all("call")) {
                String[] parts = call.split(":");
                Map<String, Object> rec = Peer.record("event", "admin", "call", parts[0]);
                try {
                    rec.put("result", call(admin, parts));
                    rec.put("ok", true);
                } catch (IllegalArgumentException e) {
                    throw e;
                } catch (Exception e) {
                    failures++;
                    rec.put("ok", false);
                    rec.put("error", String.valueOf(e));
                    rec.put("code", Peer.responseCode(e));
                    rec.put("remark", Peer.responseRemark(e));
                }
                Peer.emit(rec);
            }
        } finally {
            admin.shutdown();
        }
        return 0;
    }

    private static String arg(String[] parts, int i) {
        if (parts.length <= i) {
            throw new IllegalArgumentException(parts[0] + " needs " + i + " argument(s)");
        }
        return parts[i];
    }

    private static Object call(DefaultMQAdminExt admin, String[] parts) throws Exception {
        switch (parts[0]) {
            case "clusterList":
                return clusterList(admin.examineBrokerClusterInfo());
            case "topicList":
                return Peer.sortedList(admin.fetchAllTopicList().getTopicList());
            case "topicRoute":
                return route(admin.examineTopicRouteInfo(arg(parts, 1)));
            case "topicStatus":
                return topicStatus(admin.examineTopicStats(arg(parts, 1)));
            case "updateTopic":
                return updateTopic(admin, arg(parts, 1), Integer.parseInt(arg(parts, 2)));
            case "consumerProgress":
                return consumerProgress(admin, arg(parts, 1));
            case "consumerConnection":
                return connection(admin.examineConsumerConnectionInfo(arg(parts, 1)));
            case "queryMsgById":
                return queryById(admin, arg(parts, 1), arg(parts, 2));
            case "queryMsgByKey":
                QueryResult qr = admin.queryMessage(arg(parts, 1), arg(parts, 2), 64, 0, Long.MAX_VALUE);
                List<Object> found = new ArrayList<>();
                for (MessageExt m : qr.getMessageList()) {
                    found.add(Msgs.received("found", m));
                }
                return found;
            default:
                throw new IllegalArgumentException("unknown admin call " + parts[0]);
        }
    }

    private static Object clusterList(ClusterInfo info) {
        Map<String, Object> out = Peer.record();
        Map<String, Object> brokers = Peer.record();
        for (BrokerData bd : info.getBrokerAddrTable().values()) {
            brokers.put(bd.getBrokerName(), Peer.record("cluster", bd.getCluster(), "addrs", addrs(bd)));
        }
        out.put("brokers", brokers);
        Map<String, Object> clusters = Peer.record();
        for (Map.Entry<String, Set<String>> e : info.getClusterAddrTable().entrySet()) {
            clusters.put(e.getKey(), Peer.sortedList(e.getValue()));
        }
        out.put("clusters", clusters);
        return out;
    }

    /** Broker id to address, the ids as strings so that the record stays JSON. */
    private static Map<String, String> addrs(BrokerData bd) {
        Map<String, String> out = new java.util.TreeMap<>();
        bd.getBrokerAddrs().forEach((id, addr) -> out.put(String.valueOf(id), addr));
        return out;
    }

    private static Object route(TopicRouteData route) {
        List<Object> queues = new ArrayList<>();
        for (QueueData qd : route.getQueueDatas()) {
            queues.add(Peer.record("brokerName", qd.getBrokerName(), "read", qd.getReadQueueNums(),
                "write", qd.getWriteQueueNums(), "perm", qd.getPerm(), "topicSysFlag", qd.getTopicSysFlag()));
        }
        List<Object> brokers = new ArrayList<>();
        for (BrokerData bd : route.getBrokerDatas()) {
            brokers.add(Peer.record("cluster", bd.getCluster(), "brokerName", bd.getBrokerName(),
                "addrs", addrs(bd)));
        }
        return Peer.record("queues", queues, "brokers", brokers, "orderTopicConf", route.getOrderTopicConf());
    }

    private static Object topicStatus(TopicStatsTable stats) {
        List<MessageQueue> mqs = new ArrayList<>(stats.getOffsetTable().keySet());
        mqs.sort(null);
        List<Object> out = new ArrayList<>();
        for (MessageQueue mq : mqs) {
            TopicOffset o = stats.getOffsetTable().get(mq);
            out.add(Peer.record("brokerName", mq.getBrokerName(), "queueId", mq.getQueueId(),
                "min", o.getMinOffset(), "max", o.getMaxOffset(), "lastUpdate", o.getLastUpdateTimestamp()));
        }
        return out;
    }

    private static Object updateTopic(DefaultMQAdminExt admin, String topic, int queues) throws Exception {
        TopicConfig config = new TopicConfig(topic);
        config.setReadQueueNums(queues);
        config.setWriteQueueNums(queues);
        List<String> masters = new ArrayList<>();
        for (BrokerData bd : admin.examineBrokerClusterInfo().getBrokerAddrTable().values()) {
            String master = bd.getBrokerAddrs().get(0L);
            if (master != null) {
                admin.createAndUpdateTopicConfig(master, config);
                masters.add(master);
            }
        }
        return masters;
    }

    private static Object consumerProgress(DefaultMQAdminExt admin, String group) throws Exception {
        ConsumeStats stats = admin.examineConsumeStats(group);
        List<MessageQueue> mqs = new ArrayList<>(stats.getOffsetTable().keySet());
        mqs.sort(null);
        List<Object> queues = new ArrayList<>();
        for (MessageQueue mq : mqs) {
            OffsetWrapper o = stats.getOffsetTable().get(mq);
            queues.add(Peer.record("topic", mq.getTopic(), "brokerName", mq.getBrokerName(), "queueId",
                mq.getQueueId(), "brokerOffset", o.getBrokerOffset(), "consumerOffset", o.getConsumerOffset(),
                "lastTimestamp", o.getLastTimestamp()));
        }
        // As mqadmin: who holds each queue, through the broker asking each client for its running info.
        Map<String, Object> allocation = Peer.record();
        Object allocationError = null;
        try {
            for (Connection conn : admin.examineConsumerConnectionInfo(group).getConnectionSet()) {
                ConsumerRunningInfo info = admin.getConsumerRunningInfo(group, conn.getClientId(), false);
                for (MessageQueue mq : info.getMqTable().keySet()) {
                    allocation.put(mq.getTopic() + "/" + mq.getBrokerName() + "/" + mq.getQueueId(), conn.getClientId());
                }
            }
        } catch (Exception e) {
            allocationError = String.valueOf(e);
        }
        return Peer.record("queues", queues, "consumeTps", stats.getConsumeTps(), "diffTotal",
            stats.computeTotalDiff(), "allocation", Peer.sorted(allocation), "allocationError", allocationError);
    }

    private static Object connection(ConsumerConnection cc) {
        List<Object> conns = new ArrayList<>();
        for (Connection c : cc.getConnectionSet()) {
            conns.add(Peer.record("clientId", c.getClientId(), "clientAddr", c.getClientAddr(),
                "language", String.valueOf(c.getLanguage()), "version", c.getVersion()));
        }
        Map<String, Object> subs = Peer.record();
        cc.getSubscriptionTable().forEach((topic, sd) -> subs.put(topic, Peer.record(
            "subString", sd.getSubString(), "tags", Peer.sortedList(sd.getTagsSet()),
            "expressionType", sd.getExpressionType())));
        return Peer.record("connections", conns, "subscriptions", Peer.sorted(subs),
            "consumeType", String.valueOf(cc.getConsumeType()), "messageModel", String.valueOf(cc.getMessageModel()),
            "consumeFromWhere", String.valueOf(cc.getConsumeFromWhere()), "minVersion", cc.computeMinVersion());
    }

    private static Object queryById(DefaultMQAdminExt admin, String topic, String id) throws Exception {
        MessageExt msg = admin.viewMessage(topic, id);
        Map<String, Object> out = Msgs.received("found", msg);
        // mqadmin queryMsgById also prints the message's track: which groups consumed it.
        try {
            List<Object> tracks = new ArrayList<>();
            for (MessageTrack t : admin.messageTrackDetail(msg)) {
                tracks.add(Peer.record("group", t.getConsumerGroup(), "trackType", String.valueOf(t.getTrackType()),
                    "exception", t.getExceptionDesc()));
            }
            out.put("tracks", tracks);
        } catch (Exception e) {
            out.put("tracksError", String.valueOf(e));
        }
        return out;
    }
}
