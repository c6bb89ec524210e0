"""An os-ken app for TestOSKenThroughFlowstated: on connect, over OpenFlow
1.5, it installs a small pipeline (a group, a meter and flows that use
them) and sends a barrier. It knows nothing of flowstate."""

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_5


class Pipeline(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def install(self, ev):
        dp = ev.msg.datapath
        ofp, p = dp.ofproto, dp.ofproto_parser
        dp.send_msg(p.OFPMeterMod(dp, command=ofp.OFPMC_ADD, flags=ofp.OFPMF_KBPS, meter_id=5,
                                  bands=[p.OFPMeterBandDrop(rate=10000, burst_size=0)]))
        buckets = [p.OFPBucket(bucket_id=i, actions=[p.OFPActionOutput(port)])
                   for i, port in enumerate((1, 2))]
        dp.send_msg(p.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_ALL, group_id=8, buckets=buckets))
        for i in range(1, 11):
            match = p.OFPMatch(eth_type=0x0800, ipv4_dst='10.7.0.%d' % i)
            inst = [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(2)])]
            dp.send_msg(p.OFPFlowMod(dp, table_id=0, priority=10, cookie=0x7000 + i, match=match, instructions=inst))
        match = p.OFPMatch(eth_type=0x0800, ipv4_dst='10.7.1.1')
        inst = [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionMeter(5), p.OFPActionGroup(8)])]
        dp.send_msg(p.OFPFlowMod(dp, table_id=0, priority=20, cookie=0x7100, match=match, instructions=inst))
        dp.send_msg(p.OFPBarrierRequest(dp))
