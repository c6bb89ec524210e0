"""An os-ken app for TestOSKen13LeftAlone: on connect, over OpenFlow 1.3
only, it installs a meter, a group and permanent flows (port 1 to port 2
through the group, an IPv4 flow with the meter) and sends a barrier. It
knows nothing of flowstate."""

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3


class Pipeline13(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def install(self, ev):
        dp = ev.msg.datapath
        ofp, p = dp.ofproto, dp.ofproto_parser
        dp.send_msg(p.OFPMeterMod(dp, command=ofp.OFPMC_ADD, flags=ofp.OFPMF_KBPS, meter_id=3,
                                  bands=[p.OFPMeterBandDrop(rate=10000, burst_size=0)]))
        dp.send_msg(p.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_ALL, group_id=13,
                                  buckets=[p.OFPBucket(actions=[p.OFPActionOutput(2)])]))
        inst = [p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionGroup(13)])]
        dp.send_msg(p.OFPFlowMod(dp, table_id=0, priority=100, cookie=0x1300, match=p.OFPMatch(in_port=1),
                                 instructions=inst))
        inst = [p.OFPInstructionMeter(3),
                p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(1)])]
        dp.send_msg(p.OFPFlowMod(dp, table_id=0, priority=200, cookie=0x1301,
                                 match=p.OFPMatch(in_port=2, eth_type=0x0800, ipv4_dst='10.13.0.1'),
                                 instructions=inst))
        dp.send_msg(p.OFPBarrierRequest(dp))
